"""Gemma 2's sliding window, which mlx-lm's gemma2 leaves out: its even layers (0, 2, ...)
attend to the last ``sliding_window`` positions only, as Hugging Face's and llama.cpp's
Gemma 2 do; the odd layers attend to the whole context.

Invariant: the local layers hold mlx-lm's RotatingKVCache of the window (so batching,
trimming and the prefix cache treat them as any sliding-window model's layers) and get
the window's mask, the global layers keep KVCache and the causal mask; within the
window every output is mlx-lm's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache, RotatingKVCache

from ..layering import KERNEL, install

__all__ = ["apply_windows"]

if TYPE_CHECKING:  # the classes the mixins are installed on (``install``), as the checker sees their ``self``
    from mlx_lm.models import gemma2

    _ModelHost = gemma2.Model
    _InnerHost = gemma2.GemmaModel
else:  # at run time they are plain mixins
    _ModelHost = _InnerHost = object


class Gemma2Caches(_ModelHost):
    """The top-level model's caches: a rotating window for each local layer."""

    RANK = KERNEL
    model: Gemma2Windows  # installed together (apply_windows)

    def make_cache(self) -> list[Any]:
        window = self.model._window
        return [RotatingKVCache(max_size=window) if i % 2 == 0 else KVCache() for i in range(len(self.layers))]


class Gemma2Windows(_InnerHost):
    """GemmaModel.__call__ with the local layers' windowed mask."""

    RANK = KERNEL
    _window: int  # set before it is installed

    def __call__(self, inputs: mx.array, cache=None):
        h = self.embed_tokens(inputs)
        h = h * (self.args.hidden_size**0.5)
        if cache is None:
            cache = [None] * len(self.layers)
        local = create_attention_mask(h, cache[0], window_size=self._window, return_array=True)
        full = create_attention_mask(h, cache[1], return_array=True) if len(cache) > 1 else local
        for i, (layer, c) in enumerate(zip(self.layers, cache)):
            h = layer(h, local if i % 2 == 0 else full, c)
        return self.norm(h)


def apply_windows(model: nn.Module, config: Mapping[str, Any]) -> bool:
    """Installs Gemma 2's window where the model is mlx-lm's gemma2 with one; whether it did."""
    inner = getattr(model, "model", None)
    window = config.get("sliding_window")
    if (inner is None or (type(inner).__module__, type(inner).__name__) != ("mlx_lm.models.gemma2", "GemmaModel")
            or not window):
        return False
    inner._window = int(window)
    install(inner, Gemma2Windows)
    install(model, Gemma2Caches)
    return True
