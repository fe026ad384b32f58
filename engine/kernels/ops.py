"""The kernels as mlx-lm and mlx.nn call them: each function takes the arguments of
the op it stands in for and returns None where the kernel does not apply (another
dtype, attention sinks, a quantized KV cache, a RoPE it does not know), so the
caller falls back to mlx's own op."""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from . import ext

F32 = mx.float32


def attention(q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask=None, sinks=None,
              flat: bool = False) -> mx.array | None:
    """mx.fast.scaled_dot_product_attention's result ([B, Hq, L, Dv]; [B, L, Hq * Dv]
    with ``flat``) for mask None, "causal" or a bool/additive array."""
    if sinks is not None or not (q.dtype == k.dtype == v.dtype == F32):
        return None
    if isinstance(mask, str):
        if mask != "causal":
            return None
        return ext().attention(q, k, v, scale, True, 0, None, flat, None)
    if mask is not None:
        if mask.ndim > 4:
            return None
        if mask.dtype != mx.bool_:
            mask = mask.astype(F32)
    return ext().attention(q, k, v, scale, False, 0, mask, flat, None)


@dataclass(frozen=True)
class RopeSpec:
    """How a RoPE module rotates: the first ``dims`` of each head, at positions
    times ``scale``, with these inverse frequencies (computed as mx.fast.rope's
    CPU path computes them, so results match it exactly)."""

    dims: int
    traditional: bool
    scale: float
    inv_freqs: mx.array

    def offsets(self, offset) -> mx.array:
        if isinstance(offset, mx.array):
            return offset.reshape(-1).astype(mx.int32)
        return _offset_array(int(offset))

    def __call__(self, x: mx.array, offset=0) -> mx.array:
        return ext().rope(x, self.dims, self.traditional, self.scale, self.inv_freqs, self.offsets(offset))


_last_offset: tuple[int, mx.array] = (-1, mx.array([0], dtype=mx.int32))


def _offset_array(offset: int) -> mx.array:
    """[offset] as int32, shared by every layer of a step (arrays are immutable)."""
    global _last_offset
    last = _last_offset
    if last[0] != offset:
        last = _last_offset = (offset, mx.array([offset], dtype=mx.int32))
    return last[1]


def rope_spec(module: nn.Module) -> RopeSpec | None:
    """The RopeSpec of nn.RoPE or mlx-lm's Llama3RoPE (others: None)."""
    name = type(module).__name__
    if isinstance(module, nn.RoPE) and type(module) is nn.RoPE:
        half = module.dims // 2
        step = mx.array(math.log(module.base) / half, dtype=F32)
        inv = mx.exp(mx.arange(0, -half, -1, dtype=F32) * step)
        return RopeSpec(module.dims, module.traditional, float(module.scale), _ready(inv))
    if name == "Llama3RoPE" and type(module).__module__ == "mlx_lm.models.rope_utils":
        freqs = getattr(module, "_freqs", None)
        if freqs is None:
            return None
        return RopeSpec(module.dims, module.traditional, 1.0, _ready(mx.reciprocal(freqs.astype(F32))))
    return None


def _ready(a: mx.array) -> mx.array:
    mx.eval(a)
    return a


def linear(x: mx.array, weight: mx.array, bias: mx.array | None = None, residual: mx.array | None = None,
           norm: tuple[mx.array, float] | None = None, silu_gate: bool = False) -> mx.array | None:
    """prologue(x) @ weight.T (+ bias) (+ residual) as one primitive, the prologue an
    RMSNorm (``norm`` = (weight, eps)) or SiLU-gate of x's halves: the kernel's
    matvec for a few rows, the global BLAS's sgemm for more (None: mlx's matmul when
    there is no such BLAS, or another dtype)."""
    arrays = [x, weight, bias, residual, norm[0] if norm else None]
    if any(a is not None and a.dtype != F32 for a in arrays):
        return None
    rows = x.size // x.shape[-1] if x.ndim else 1
    if rows > 16 and not ext().blas_available():
        return None
    return ext().linear(x, weight, bias, residual, norm[0] if norm else None, norm[1] if norm else 0.0,
                        silu_gate)


def quantized_matmul(x: mx.array, layer, rows_max: int = 8) -> mx.array | None:
    """x @ W.T for an nn.QuantizedLinear / QuantizedEmbedding's affine 8/4-bit W: from
    the quantized bytes for a few rows (decode), else through a float32 copy of W
    made per call (prefill: the GEMM amortizes it)."""
    if x.dtype != F32 or not quantizable(layer):
        return None
    w, scales, biases = layer["weight"], layer["scales"], layer["biases"]
    rows = x.size // x.shape[-1] if x.ndim else 1
    if rows <= rows_max:
        return ext().quantized_matmul(x, w, scales, biases, layer.group_size, layer.bits)
    return x @ ext().dequantize(w, scales, biases, layer.group_size, layer.bits).T


def quantizable(layer) -> bool:
    """Affine 8- or 4-bit weights in groups the kernels take, with float32 scales."""
    return (getattr(layer, "mode", "affine") == "affine" and layer.bits in (4, 8)
            and layer.group_size % 32 == 0 and "biases" in layer
            and layer["scales"].dtype == F32 and layer["biases"].dtype == F32)
