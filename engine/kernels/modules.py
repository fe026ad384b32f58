"""Kernel versions of mlx.nn and mlx-lm modules, put in place by swapping an instance's class.

Invariant: parameters stay as they are, each falls back to its original ``__call__``, and other
instances of the class are untouched."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from . import ext, ops

F32 = mx.float32
_subclasses: dict[tuple[type, type], type] = {}


def swap_class(module: nn.Module, mixin: type) -> None:
    """Makes ``module`` an instance of ``mixin`` + its own class (created once)."""
    cls = type(module)
    if issubclass(cls, mixin):
        return
    key = (cls, mixin)
    if key not in _subclasses:
        _subclasses[key] = type(cls.__name__, (mixin, cls), {"__module__": cls.__module__,
                                                               "__qualname__": cls.__qualname__})
    module.__class__ = _subclasses[key]


class KernelRMSNorm:
    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype != F32:
            return super().__call__(x)
        return ext().rms_norm(x, self["weight"], self.eps)


class KernelLayerNorm:
    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype != F32:
            return super().__call__(x)
        return ext().layer_norm(x, self.get("weight"), self.get("bias"), self.eps)


class KernelRoPE:
    """Needs ``_kernel_rope`` (an ops.RopeSpec) set on the instance."""

    def __call__(self, x: mx.array, offset=0) -> mx.array:
        if x.dtype != F32 or x.ndim not in (3, 4):
            return super().__call__(x, offset=offset)
        return self._kernel_rope(x, offset)


class KernelLinear:
    """nn.Linear and nn.QuantizedLinear."""

    def __call__(self, x: mx.array) -> mx.array:
        y = ops.project(self, x)
        return super().__call__(x) if y is None else y


class KernelEmbedding:
    """nn.Embedding and nn.QuantizedEmbedding used as the output layer."""

    def as_linear(self, x: mx.array) -> mx.array:
        y = ops.project(self, x)
        return super().as_linear(x) if y is None else y


def swap_leaf_modules(model: nn.Module) -> dict[str, int]:
    """Norms, RoPE and quantized layers anywhere in ``model``; counts by kind."""
    counts: dict[str, int] = {}

    def mark(kind: str) -> None:
        counts[kind] = counts.get(kind, 0) + 1

    for _, module in model.named_modules():
        cls = type(module)
        if cls is nn.Linear and module["weight"].dtype == F32:
            swap_class(module, KernelLinear)
            mark("linear")
        elif cls is nn.Embedding and module["weight"].dtype == F32:
            swap_class(module, KernelEmbedding)
            mark("embedding_as_linear")
        elif cls is nn.RMSNorm:
            swap_class(module, KernelRMSNorm)
            mark("rms_norm")
        elif cls is nn.LayerNorm:
            swap_class(module, KernelLayerNorm)
            mark("layer_norm")
        elif (spec := ops.rope_spec(module)) is not None:
            module._kernel_rope = spec
            swap_class(module, KernelRoPE)
            mark("rope")
        elif cls is nn.QuantizedLinear and ops.quantizable(module):
            swap_class(module, KernelLinear)
            mark(f"q{module.bits}_linear")
        elif cls is nn.QuantizedEmbedding and ops.quantizable(module):
            swap_class(module, KernelEmbedding)
            mark(f"q{module.bits}_embedding")
    return counts
