"""Where an mlx-lm model cannot serve a batch as written, the fix, installed per instance.

Invariant: each fix computes the module's own output (KERNEL rank: innermost), only for
inputs the module refused before; one row computes exactly as mlx-lm does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import mlx.core as mx
import mlx.nn as nn

from ..layering import KERNEL, install

__all__ = ["apply_batch_fixes"]

if TYPE_CHECKING:  # the class the mixin is installed on (``install``), as the checker sees its ``self``
    from mlx_lm.models.gemma2 import Attention as _AttentionHost
else:  # at run time a plain mixin
    _AttentionHost = object


class GroupedHeadsMask(_AttentionHost):
    """Gemma 2's attention groups its query heads as (batch, kv heads, repeats, L, D) and
    applies the mask to those scores: a batch's (batch, 1, L, K) mask gains the group axis."""

    RANK = KERNEL

    def __call__(self, x: mx.array, mask=None, cache=None):
        if isinstance(mask, mx.array) and mask.ndim == 4 and self.repeats > 1:
            mask = mask[:, :, None]
        return super().__call__(x, mask, cache)


_FIXES = {("mlx_lm.models.gemma2", "Attention"): GroupedHeadsMask}


def apply_batch_fixes(model: nn.Module) -> int:
    """Installs every fix that applies; how many modules took one."""
    count = 0
    for _, module in model.named_modules():
        fix = _FIXES.get((type(module).__module__, type(module).__name__))
        if fix is not None:
            install(module, fix)
            count += 1
    return count
