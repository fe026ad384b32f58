"""The kernels in the BERT encoder, with no work spent on padding (tokens packed to [N, hidden]).

Invariants: each packed sequence attends only its own keys, and padded positions come back
as zeros, so pooling is unchanged; other masks take the encoder's own forward. A layer's four
products run on weights packed once for the kernels' own products (float32 on AVX-512 FMAs,
or what ``set_products`` asks: bfloat16 on AVX-512 BF16, 8-bit codes on AVX-512 VNNI), with the
intermediate's GELU in the product's epilogue; where the build lacks the instructions, float32
runs through the kernels' BLAS linear and narrower products through ggml (bfloat16, or Q8_0
blocks with the activations quantized to match). Attention runs whole score rows per sequence
(segment attention) where the build has AVX-512 and the head width is a multiple of 32, else
the kernels' flash attention over segments. The float weights stay for the encoder's own
forward; ``KernelEncoder.kernel_bytes`` counts the packed copies. Layers are evaluated one at a
time, so a layer's buffers are reused by the next instead of all being allocated ahead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..layering import KERNEL, install
from . import ext
from .ggml import GgmlWeights
from .modules import swap_leaf_modules

_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}  # packed_linear's act

if TYPE_CHECKING:  # the class the mixin is installed on (``apply``), as the checker sees its ``self``
    from ..embedding.encoder import EncoderModel as _EncoderHost
else:  # at run time a plain mixin
    _EncoderHost = object


class KernelEncoder(_EncoderHost):
    RANK = KERNEL

    def __call__(self, input_ids: mx.array, attention_mask: mx.array | None = None,
                 token_type_ids: mx.array | None = None) -> mx.array:
        lengths = _prefix_lengths(input_ids, attention_mask)
        if lengths is None or self.embeddings.word_embeddings.weight.dtype != mx.float32:
            return super().__call__(input_ids, attention_mask, token_type_ids)
        if input_ids.shape[1] > self.config.max_position_embeddings:
            return super().__call__(input_ids, attention_mask, token_type_ids)
        return packed_forward(self, input_ids, lengths, token_type_ids)

    def kernel_bytes(self) -> int:
        """Bytes of the layers' packed product weights, held beside the float ones."""
        return sum(p.nbytes for layer in self.encoder.layer for p in layer._kernel_products)


def _prefix_lengths(input_ids: mx.array, attention_mask: mx.array | None) -> list[int] | None:
    """Real tokens per row, when every row's mask is ones then zeros."""
    B, L = input_ids.shape
    if attention_mask is None:
        return [L] * B
    mask = np.array(attention_mask) != 0
    lengths = mask.sum(axis=1)
    if not (mask == (np.arange(L)[None, :] < lengths[:, None])).all() or (lengths == 0).any():
        return None
    return [int(n) for n in lengths]


class _Linear:
    """act(x @ weight.T + bias (+ residual)), float32 through the BLAS."""

    def __init__(self, weight: mx.array, bias: mx.array | None, nbytes: int = 0):
        self.weight, self.bias, self.nbytes = weight, bias, nbytes  # nbytes: what it holds beyond the module's

    def __call__(self, x: mx.array, residual: mx.array | None = None, act: str = "none") -> mx.array:
        return _activated(ext().linear(x, self.weight, self.bias, residual), act)


def _activated(y: mx.array, act: str) -> mx.array:
    return y if act == "none" else ext().gelu(y, act == "gelu_tanh")


class _GgmlLinear:
    """The same product by ggml's CPU backend on the weight converted to one of its types."""

    def __init__(self, linear: _Linear, ggml_type: int):
        import gguf.quants  # numpy conversions, only when a precision asks

        blocks = gguf.quants.quantize(np.array(linear.weight, dtype=np.float32), gguf.GGMLQuantizationType(ggml_type))
        self.product, self.bias, self.nbytes = GgmlWeights(mx.array(blocks), ggml_type), linear.bias, blocks.nbytes

    def __call__(self, x: mx.array, residual: mx.array | None = None, act: str = "none") -> mx.array:
        y = self.product(x)
        y = y if self.bias is None else y + self.bias
        return _activated(y if residual is None else y + residual, act)


def _products(layer: nn.Module) -> tuple[_Linear, _Linear, _Linear, _Linear]:
    """The layer's query-key-value, attention output, intermediate and output products."""
    attn = layer.attention["self"]
    parts = (attn.query, attn.key, attn.value)
    qkv = mx.concatenate([p.weight for p in parts], axis=0)
    bias = mx.concatenate([p.bias for p in parts], axis=0) if all("bias" in p for p in parts) else None
    mx.eval(qkv, bias) if bias is not None else mx.eval(qkv)
    dense = (layer.attention.output.dense, layer.intermediate.dense, layer.output.dense)
    attn_out, intermediate, output = (_Linear(d.weight, d.get("bias")) for d in dense)
    return _Linear(qkv, bias, qkv.nbytes), attn_out, intermediate, output


class _OwnLinear:
    """The same product by the kernels' own packed one: "f32" (AVX-512 FMAs), "bf16" (bfloat16
    values, float32 sums; AVX-512 BF16) or "int8" (8-bit codes, integer sums; AVX-512 VNNI)."""

    def __init__(self, linear: _Linear, kind: str):
        self.kind, self.packed = kind, ext().linear_pack(linear.weight.astype(mx.float32), kind)
        bias = None if linear.bias is None else linear.bias.astype(mx.float32)
        self.n, self.bias, self.nbytes = linear.weight.shape[0], bias, self.packed.nbytes

    def __call__(self, x: mx.array, residual: mx.array | None = None, act: str = "none") -> mx.array:
        return ext().packed_linear(x, self.packed, self.kind, self.n, self.bias, residual, act)


def own_product(precision: str) -> bool:
    """Whether this build of the kernels has its own ``precision`` product ("f32", "bf16", "int8")."""
    return ext().packed_available(precision)


def set_products(encoder: nn.Module, precision: str, ggml_type: int | None) -> None:
    """Every layer's products in ``precision``: the kernels' own where this build has it, else
    the BLAS (f32) or ggml's ``ggml_type``."""
    # A half-precision checkpoint runs the encoder's own forward (KernelEncoder): no f32 copies.
    own = own_product(precision) and (precision != "f32" or encoder.embeddings.word_embeddings.weight.dtype
                                      == mx.float32)
    if precision != "f32" and not own and ggml_type is None:
        raise ValueError(f"{precision} products need the kernels' own or a ggml type")
    for layer in encoder.encoder.layer:
        products = _products(layer)
        if own:
            layer._kernel_products = tuple(_OwnLinear(p, precision) for p in products)
        elif precision == "f32":
            layer._kernel_products = products
        else:
            assert ggml_type is not None
            layer._kernel_products = tuple(_GgmlLinear(p, ggml_type) for p in products)


_NO_ROPE = None


def packed_forward(encoder, input_ids: mx.array, lengths: list[int],
                   token_type_ids: mx.array | None) -> mx.array:
    B, L = input_ids.shape
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    flat = np.concatenate([b * L + np.arange(n) for b, n in enumerate(lengths)]).astype(np.int32)
    positions = mx.array(np.concatenate([np.arange(n) for n in lengths]).astype(np.int32))
    index = mx.array(flat)
    ids = input_ids.reshape(-1)[index]
    types = token_type_ids.reshape(-1)[index] if token_type_ids is not None else mx.zeros_like(ids)
    emb = encoder.embeddings
    h = emb.word_embeddings(ids) + emb.position_embeddings(positions) + emb.token_type_embeddings(types)
    h = emb.LayerNorm(h[None])  # [1, N, hidden] from here on
    segments = mx.array(starts)
    for layer in encoder.encoder.layer:
        h = _layer(layer, h, segments, encoder.config.hidden_act)
        mx.eval(h)
    # Back to [B, L, hidden]: padded positions read the zero row appended at N.
    scatter = np.full(B * L, len(flat), dtype=np.int32)
    scatter[flat] = np.arange(len(flat), dtype=np.int32)
    h = mx.concatenate([h[0], mx.zeros((1, h.shape[-1]), dtype=h.dtype)], axis=0)
    return h[mx.array(scatter)].reshape(B, L, -1)


def _layer(layer: nn.Module, h: mx.array, segments: mx.array, act: str) -> mx.array:
    """One BertLayer over packed tokens h [1, N, hidden]."""
    global _NO_ROPE
    K = ext()
    attn = layer.attention["self"]
    qkv, attn_out, intermediate, output = layer._kernel_products
    if _NO_ROPE is None:
        _NO_ROPE = (mx.zeros((0,), dtype=mx.float32), mx.zeros((1,), dtype=mx.int32))
    heads = K.qkv_rope(qkv(h), attn.num_heads, attn.num_heads, attn.head_dim, 0, False, 1.0, *_NO_ROPE)
    if attn.head_dim % 32 == 0 and K.segment_attention_available():
        a = K.segment_attention(*heads, attn.scale, segments)
    else:
        a = K.attention(*heads, attn.scale, False, 0, None, True, segments)
    a = layer.attention.output.LayerNorm(attn_out(a, h))
    inner = intermediate(a, act=_ACT[act]) if act in _ACT else layer.intermediate._act(intermediate(a))
    return layer.output.LayerNorm(output(inner, a))


def apply(encoder: nn.Module) -> dict[str, int]:
    set_products(encoder, "f32", None)
    counts = swap_leaf_modules(encoder)
    install(encoder, KernelEncoder)
    counts["packed_encoder"] = 1
    return counts
