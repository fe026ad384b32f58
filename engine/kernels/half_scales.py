"""Quantized layers the kernels run hold their scales and biases as float16 where every
value is exact in half precision (GGUF's Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 blocks store them so): the
kernels read either width, so products are bit-identical and decode reads fewer bytes.

Invariant: a compacted layer computes in float32 everywhere. Its ``compute_dtype`` says
so, and the paths that do not go through a kernel (a fallback, an embedding lookup, a
DoRA norm) take ``float_parts`` instead of the stored halves."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

F16, F32 = mx.float16, mx.float32
_KINDS = (nn.QuantizedLinear, nn.QuantizedEmbedding)


def compact(model: nn.Module, runs_kernels) -> int:
    """Halves the scales and biases of every quantized layer ``runs_kernels(layer)`` accepts
    whose values survive the round trip exactly; returns how many layers changed."""
    changed = 0
    for _, layer in model.named_modules():
        if not isinstance(layer, _KINDS) or "biases" not in layer or not runs_kernels(layer):
            continue
        scales, biases = layer["scales"], layer["biases"]
        if scales.dtype != F32 or biases.dtype != F32:
            continue
        halves = scales.astype(F16), biases.astype(F16)
        if not all(mx.array_equal(h.astype(F32), f).item() for h, f in zip(halves, (scales, biases))):
            continue
        layer.scales, layer.biases = halves
        layer.compute_dtype = F32  # a plain attribute: adapters cast their weights to it
        mx.eval(layer.scales, layer.biases)
        changed += 1
    return changed


def float_parts(layer: nn.Module, index=None) -> tuple[mx.array, mx.array | None]:
    """The layer's scales and biases (rows ``index`` only, if given) in float32."""
    scales, biases = layer["scales"], layer.get("biases")
    if index is not None:
        scales, biases = scales[index], None if biases is None else biases[index]
    if getattr(layer, "compute_dtype", None) == F32:
        scales, biases = scales.astype(F32), None if biases is None else biases.astype(F32)
    return scales, biases


def stock_matmul(layer: nn.Module, x: mx.array) -> mx.array:
    """``layer(x)`` (or an embedding's ``as_linear``) through MLX's own op, scales in float32."""
    scales, biases = float_parts(layer)
    y = mx.quantized_matmul(x, layer["weight"], scales=scales, biases=biases, transpose=True,
                            group_size=layer.group_size, bits=layer.bits, mode=layer.mode)
    return y + layer["bias"] if "bias" in layer else y
