"""The kernels as mlx-lm and mlx.nn call them.

Invariant: each takes the arguments of the op it stands in for and returns None where it
does not apply, so the caller falls back to mlx's own op."""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from ..layering import layers_of, only_kernels
from ..loading.traits import rope_kind
from . import ext

F32 = mx.float32
# Up to this many rows a quantized product needs no BLAS (codes to floats in registers); beyond,
# it tiles its weights through the BLAS (one primitive either way), and without one is MLX's.
MATVEC_ROWS = 64


def attention(q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask=None, sinks=None,
              flat: bool = False, length: int = -1) -> mx.array | None:
    """mx.fast.scaled_dot_product_attention's result ([B, L, Hq * Dv] with ``flat``) over the
    first ``length`` keys and values (-1: all; a cache's buffers as they are)."""
    if sinks is not None or not (q.dtype == k.dtype == v.dtype == F32) or q.size == 0 or k.size == 0:
        return None  # (an empty split, as windowed towers make: MLX's own answer)
    taken = kernel_mask(mask)
    if taken is None:
        return None
    return ext().attention(q, k, v, scale, taken[0], 0, taken[1], flat, None, length)


def kernel_mask(mask) -> tuple[bool, mx.array | None] | None:
    """mlx-lm's attention mask as the kernels take it: (causal, array mask: bool, or additive
    as float32), or None where they do not ("causal" and None and arrays of up to 4 axes do)."""
    if isinstance(mask, str):
        return (True, None) if mask == "causal" else None
    if mask is None:
        return False, None
    if mask.ndim > 4:
        return None
    return False, mask if mask.dtype == mx.bool_ else mask.astype(F32)


def cache_attention(q: mx.array, cache, *, scale: float, mask=None, sinks=None, flat: bool = False) -> mx.array | None:
    """Attention over a quantized cache's buffers as they are, up to its length (the
    slices its ``update_and_fetch`` returned are then never computed)."""
    if hasattr(cache, "parts"):  # a batch: packed buffers
        keys, values, length = cache.parts()
    else:
        keys, values, length = cache.keys, cache.values, cache.offset
    return quantized_attention(q, keys, values, scale=scale, mask=mask, group_size=cache.group_size,
                               bits=cache.bits, sinks=sinks, flat=flat, length=int(length))


def quantized_attention(q: mx.array, k: tuple, v: tuple, *, scale: float, mask=None, group_size: int, bits: int,
                        sinks=None, flat: bool = False, length: int = -1) -> mx.array | None:
    """mlx-lm's quantized SDPA over (codes, scales, biases) keys and values (the first ``length``)."""
    if sinks is not None or q.dtype != F32 or any(x.dtype != F32 for x in (*k[1:], *v[1:])):
        return None
    if group_size % (2 * ext().simd_width) or bits not in (4, 8):
        return None
    taken = kernel_mask(mask)
    if taken is None:
        return None
    causal, mask = taken
    return ext().attention_quantized(q, list(k), list(v), group_size, bits, scale, causal, mask, flat, length)


@dataclass(frozen=True)
class RopeSpec:
    """How a RoPE module rotates; frequencies computed as mx.fast.rope's CPU path does, to match exactly."""

    dims: int
    traditional: bool
    scale: float
    inv_freqs: mx.array

    def offsets(self, offset) -> mx.array:
        """int32 [1] or [B]: a batch cache's own offsets array where it already is one."""
        if isinstance(offset, mx.array):
            if offset.ndim == 1 and offset.dtype == mx.int32:
                return offset
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
    kind = rope_kind(module)
    if kind == "rope":
        half = module.dims // 2
        step = mx.array(math.log(module.base) / half, dtype=F32)
        inv = mx.exp(mx.arange(0, -half, -1, dtype=F32) * step)
        return RopeSpec(module.dims, module.traditional, float(module.scale), _ready(inv))
    if kind == "llama3":
        freqs = getattr(module, "_freqs", None)
        if freqs is None:
            return None
        return RopeSpec(module.dims, module.traditional, 1.0, _ready(mx.reciprocal(freqs.astype(F32))))
    return None


def _ready(a: mx.array) -> mx.array:
    mx.eval(a)
    return a


@dataclass(frozen=True)
class Product:
    """What ``project`` decides from the layer alone: its arrays as the kernels take them.
    ``quant``: (weight, scales, biases, group size, bits), or None for float32 weights."""

    weight: mx.array
    quant: tuple | None
    bias: mx.array | None


def product(layer) -> Product | None:
    """The layer's Product, or None where no kernel product applies to it; kept on the layer
    while its class and arrays stay the same (a decode step asks for every layer's)."""
    key = (type(layer), layer.get("weight"), layer.get("scales"), layer.get("biases"), layer.get("bias"))
    cached = layer.__dict__.get("_kernel_product")
    if (cached is not None and cached[0][0] is key[0] and cached[0][1] is key[1] and cached[0][2] is key[2]
            and cached[0][3] is key[3] and cached[0][4] is key[4]):
        return cached[1]
    made = _product(layer)
    layer.__dict__["_kernel_product"] = (key, made)
    return made


def _product(layer) -> Product | None:
    bias = layer.get("bias")
    if bias is not None and bias.dtype != F32:
        return None
    if "scales" in layer:
        if not quantizable(layer):
            return None
        quant = (layer["weight"], layer["scales"], layer["biases"], layer.group_size, layer.bits)
        return Product(layer["weight"], quant, bias)
    if layer["weight"].dtype != F32:
        return None
    return Product(layer["weight"], None, bias)


_PLAIN_CALLS = {nn.Linear.__call__, nn.QuantizedLinear.__call__}
_plain_classes: dict[type, bool] = {}


def plain_layer(layer: nn.Module) -> bool:
    """Whether the layer computes only its weights (its class says: layering makes one per mixin set)."""
    cls = type(layer)
    known = _plain_classes.get(cls)
    if known is None:
        known = _plain_classes[cls] = only_kernels(layer) and layers_of(layer)[0].__call__ in _PLAIN_CALLS
    return known


def project(layer, x: mx.array, residual: mx.array | None = None, norm: tuple[mx.array, float] | None = None,
            silu_gate: bool = False) -> mx.array | None:
    """layer(prologue(x)) (+ residual) in one primitive; the prologue is an RMSNorm
    (``norm`` = (weight, eps)) or a SiLU-gate of x's halves. None where it does not apply."""
    plan = product(layer)
    if plan is None or x.dtype != F32 or (residual is not None and residual.dtype != F32) or (
            norm is not None and norm[0].dtype != F32):
        return None
    rows = x.size // x.shape[-1] if x.ndim else 1
    args = (plan.bias, residual, norm[0] if norm else None, norm[1] if norm else 0.0, silu_gate)
    if plan.quant is not None:
        if rows <= MATVEC_ROWS or ext().blas_available():
            return ext().quantized_matmul(x, *plan.quant, *args)
        return None
    if rows > 16 and not ext().blas_available():
        return None
    return ext().linear(x, plan.weight, *args)


def quantizable(layer) -> bool:
    """Affine 8-, 6-, 5- or 4-bit weights in groups the kernels take, with float32 scales and biases
    (or float16 ones where ``half_scales`` halved them)."""
    scales = layer["scales"].dtype
    if scales == mx.float16 and getattr(layer, "compute_dtype", None) != F32:
        return False
    return (getattr(layer, "mode", "affine") == "affine" and layer.bits in (4, 5, 6, 8)
            and layer.group_size % 32 == 0 and "biases" in layer
            and scales in (F32, mx.float16) and layer["biases"].dtype == scales)
