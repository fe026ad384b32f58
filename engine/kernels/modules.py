"""Kernel versions of mlx.nn and mlx-lm modules, installed on loaded instances as
``layering`` mixins of rank KERNEL. Each falls back to its original ``__call__``
where the kernel does not apply."""

from __future__ import annotations

from typing import TYPE_CHECKING

import mlx.core as mx
import mlx.nn as nn

from ..layering import KERNEL, install
from . import ext, half_scales, ops

F32 = mx.float32

if TYPE_CHECKING:  # the classes each mixin is installed on (``install``), as the checker sees its ``self``
    _RMSNormHost = nn.RMSNorm
    _LayerNormHost = nn.LayerNorm
    _RoPEHost = nn.RoPE  # or mlx-lm's Llama3RoPE, called the same way
    _LinearHost = nn.Linear  # or nn.QuantizedLinear, called the same way
    _EmbeddingHost = nn.QuantizedEmbedding  # or nn.Embedding, whose calls it shares
else:  # at run time they are plain mixins
    _RMSNormHost = _LayerNormHost = _RoPEHost = _LinearHost = _EmbeddingHost = object


class KernelRMSNorm(_RMSNormHost):
    RANK = KERNEL

    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype != F32:
            return super().__call__(x)
        return ext().rms_norm(x, self["weight"], self.eps)


class KernelLayerNorm(_LayerNormHost):
    RANK = KERNEL

    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype != F32:
            return super().__call__(x)
        return ext().layer_norm(x, self.get("weight"), self.get("bias"), self.eps)


class KernelRoPE(_RoPEHost):
    """Needs ``_kernel_rope`` (an ops.RopeSpec) set on the instance."""

    RANK = KERNEL
    _kernel_rope: ops.RopeSpec

    def __call__(self, x: mx.array, offset=0) -> mx.array:
        if x.dtype != F32 or x.ndim not in (3, 4):
            return super().__call__(x, offset=offset)
        return self._kernel_rope(x, offset)


class KernelLinear(_LinearHost):
    """nn.Linear and nn.QuantizedLinear."""

    RANK = KERNEL

    def __call__(self, x: mx.array) -> mx.array:
        y = ops.project(self, x)
        if y is not None:
            return y
        return half_scales.stock_matmul(self, x) if _halved(self) else super().__call__(x)


class KernelEmbedding(_EmbeddingHost):
    """nn.Embedding and nn.QuantizedEmbedding used as the output layer."""

    RANK = KERNEL

    def __call__(self, x: mx.array) -> mx.array:
        if not _halved(self):
            return super().__call__(x)
        scales, biases = half_scales.float_parts(self, x)
        return mx.dequantize(self["weight"][x], scales=scales, biases=biases, group_size=self.group_size,
                             bits=self.bits, mode=self.mode)

    def as_linear(self, x: mx.array) -> mx.array:
        y = ops.project(self, x)
        if y is not None:
            return y
        return half_scales.stock_matmul(self, x) if _halved(self) else super().as_linear(x)


def _halved(layer: nn.Module) -> bool:
    return "scales" in layer and layer["scales"].dtype == mx.float16 and getattr(layer, "compute_dtype", None) == F32


def swap_leaf_modules(model: nn.Module) -> dict[str, int]:
    """Norms, RoPE and quantized layers anywhere in ``model``; counts by kind."""
    counts: dict[str, int] = {}

    def mark(kind: str) -> None:
        counts[kind] = counts.get(kind, 0) + 1

    for _, module in model.named_modules():
        cls = type(module)
        if cls is nn.Linear and module["weight"].dtype == F32:
            install(module, KernelLinear)
            mark("linear")
        elif cls is nn.Embedding and module["weight"].dtype == F32:
            install(module, KernelEmbedding)
            mark("embedding_as_linear")
        elif cls is nn.RMSNorm:
            install(module, KernelRMSNorm)
            mark("rms_norm")
        elif cls is nn.LayerNorm:
            install(module, KernelLayerNorm)
            mark("layer_norm")
        elif (spec := ops.rope_spec(module)) is not None:
            module._kernel_rope = spec
            install(module, KernelRoPE)
            mark("rope")
        elif cls is nn.QuantizedLinear and ops.quantizable(module):
            install(module, KernelLinear)
            mark(f"q{module.bits}_linear")
        elif cls is nn.QuantizedEmbedding and ops.quantizable(module):
            install(module, KernelEmbedding)
            mark(f"q{module.bits}_embedding")
    halved = half_scales.compact(model, lambda layer: isinstance(layer, (KernelLinear, KernelEmbedding)))
    if halved:
        counts["float16_scales"] = halved
    return counts
