"""The kernels in a loaded mlx-lm model (any architecture), on the CPU backend.

Invariant: the wrapped mlx-lm functions use the kernels only while this model's ``__call__``
runs, so every other model in the process keeps the stock functions.
"""

from __future__ import annotations

import contextvars
import sys
from types import ModuleType

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import activations, base

from ..layering import KERNEL, install
from . import ext, ops
from .fused import fuse_blocks
from .modules import swap_leaf_modules

_active = contextvars.ContextVar("mlx_grpc_kernels_active", default=False)


class Marked:
    """A mixin whose ``__call__`` runs with its class's ``MARK`` (a context variable) set."""

    RANK = KERNEL
    MARK: contextvars.ContextVar

    def __call__(self, *args, **kwargs):
        token = self.MARK.set(True)
        try:
            return super().__call__(*args, **kwargs)
        finally:
            self.MARK.reset(token)


class KernelModel(Marked):
    """The top-level model: marks its forward as one that may use the kernels."""

    MARK = _active


def _attention(original):
    def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None):
        if _active.get():
            if hasattr(cache, "bits"):
                out = ops.cache_attention(queries, cache, scale=scale, mask=mask, sinks=sinks)
            else:
                out = ops.attention(queries, keys, values, scale=scale, mask=mask, sinks=sinks)
            if out is not None:
                return out
        return original(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)

    scaled_dot_product_attention.stock = original
    return scaled_dot_product_attention


def _swiglu(original):
    def swiglu(gate, x):
        if _active.get() and gate.dtype == x.dtype == mx.float32 and gate.shape == x.shape:
            return ext().silu_gate(gate, x)
        return original(gate, x)

    swiglu.stock = original
    return swiglu


_DISPATCH = {"scaled_dot_product_attention": (base.scaled_dot_product_attention, _attention),
             "swiglu": (activations.swiglu, _swiglu)}


def _patch(module: ModuleType) -> list[str]:
    """Wraps the stock functions ``module`` imported; returns the names wrapped."""
    done = []
    for name, (stock, wrap) in _DISPATCH.items():
        current = getattr(module, name, None)
        if current is stock:
            setattr(module, name, wrap(stock))
        if getattr(getattr(module, name, None), "stock", None) is stock:
            done.append(name)
    return done


def apply(model: nn.Module) -> dict[str, int]:
    """Puts the kernels into ``model``; what was replaced, by kind."""
    counts = fuse_blocks(model)
    counts.update(swap_leaf_modules(model))
    modules = {type(m).__module__ for _, m in model.named_modules()}
    for name in sorted(modules):
        if name.startswith("mlx_lm.models.") and name in sys.modules:
            for function in _patch(sys.modules[name]):
                counts[f"{function} dispatch"] = counts.get(f"{function} dispatch", 0) + 1
    install(model, KernelModel)
    if isinstance(model.get("model"), nn.Module):  # the backbone, called alone for embeddings
        install(model["model"], KernelModel)
    return {k: v for k, v in counts.items() if v}
