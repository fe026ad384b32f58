"""The kernels in an mlx-vlm vision tower and projector: linears and norms as in any
model, GELU (exact or tanh) as one primitive, and attention through the kernels.

mlx-vlm's towers call ``mx.fast.scaled_dot_product_attention`` themselves. Invariant: the
wrapper installed there takes over only while a tower marked here runs its forward (a
context variable, as the decoder's dispatch does), so every other caller in the process
keeps MLX's own function.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

import mlx.core as mx
import mlx.nn as nn

from ..layering import KERNEL, install
from . import ext, ops
from .lm_models import Marked
from .modules import swap_leaf_modules

_active = contextvars.ContextVar("mlx_grpc_tower_kernels_active", default=False)

if TYPE_CHECKING:  # the class KernelGELU is installed on (``install``), as the checker sees its ``self``
    _GELUHost = nn.GELU
else:  # at run time a plain mixin
    _GELUHost = object


class KernelTower(Marked):
    """The vision tower: marks its forward as one whose attention may use the kernels."""

    MARK = _active


class KernelGELU(_GELUHost):
    """nn.GELU, exact or tanh-approximated (not installed on ``fast``: the kernels have no sigmoid form)."""

    RANK = KERNEL

    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype != mx.float32:
            return super().__call__(x)
        return ext().gelu(x, approximate=self._approx != "none")


def _sdpa(original):
    def scaled_dot_product_attention(queries, keys, values, *args, **kwargs):
        if _active.get() and not args and set(kwargs) <= {"scale", "mask"}:
            out = ops.attention(queries, keys, values, scale=kwargs["scale"], mask=kwargs.get("mask"))
            if out is not None:
                return out
        return original(queries, keys, values, *args, **kwargs)

    scaled_dot_product_attention.stock = original
    return scaled_dot_product_attention


def apply(vlm: nn.Module) -> dict[str, int]:
    """Kernels into ``vlm``'s vision tower and projector (its language model is not there)."""
    counts = swap_leaf_modules(vlm)
    for _, module in vlm.named_modules():
        if type(module) is nn.GELU and module._approx != "fast":
            install(module, KernelGELU)
            counts["gelu"] = counts.get("gelu", 0) + 1
    if not hasattr(mx.fast.scaled_dot_product_attention, "stock"):
        mx.fast.scaled_dot_product_attention = _sdpa(mx.fast.scaled_dot_product_attention)
    for name in ("vision_tower", "vision_model"):  # llava and gemma3; idefics3 and smolvlm
        tower = vlm.get(name) if isinstance(vlm, dict) else None
        if isinstance(tower, nn.Module):
            install(tower, KernelTower)
            counts["tower_attention dispatch"] = 1
    return {k: v for k, v in counts.items() if v}
