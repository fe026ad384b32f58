"""The kernels in the BERT encoder, with no work spent on padding (tokens packed to [N, hidden]).

Invariants: each packed sequence attends only its own keys, and padded positions come back
as zeros, so pooling is unchanged; other masks take the encoder's own forward. A layer's four
products are float32 through the kernels' linear unless ``set_products`` puts narrower ones
in: the kernels' own (bfloat16 on AVX-512 BF16, 8-bit codes on AVX-512 VNNI) where the build
has them, else ggml's (bfloat16, or Q8_0 blocks with the activations quantized to match);
the float weights stay for the encoder's own forward.
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

_GELU = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True}

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
    """x @ weight.T + bias (+ residual), float32."""

    def __init__(self, weight: mx.array, bias: mx.array | None):
        self.weight, self.bias = weight, bias

    def __call__(self, x: mx.array, residual: mx.array | None = None) -> mx.array:
        return ext().linear(x, self.weight, self.bias, residual)


class _GgmlLinear:
    """The same product by ggml's CPU backend on the weight converted to one of its types."""

    def __init__(self, linear: _Linear, ggml_type: int):
        import gguf.quants  # numpy conversions, only when a precision asks

        blocks = gguf.quants.quantize(np.array(linear.weight, dtype=np.float32), gguf.GGMLQuantizationType(ggml_type))
        self.product, self.bias = GgmlWeights(mx.array(blocks), ggml_type), linear.bias

    def __call__(self, x: mx.array, residual: mx.array | None = None) -> mx.array:
        y = self.product(x)
        y = y if self.bias is None else y + self.bias
        return y if residual is None else y + residual


def _products(layer: nn.Module) -> tuple[_Linear, _Linear, _Linear, _Linear]:
    """The layer's query-key-value, attention output, intermediate and output products."""
    attn = layer.attention["self"]
    parts = (attn.query, attn.key, attn.value)
    qkv = mx.concatenate([p.weight for p in parts], axis=0)
    bias = mx.concatenate([p.bias for p in parts], axis=0) if all("bias" in p for p in parts) else None
    mx.eval(qkv, bias) if bias is not None else mx.eval(qkv)
    dense = (layer.attention.output.dense, layer.intermediate.dense, layer.output.dense)
    attn_out, intermediate, output = (_Linear(d.weight, d.get("bias")) for d in dense)
    return _Linear(qkv, bias), attn_out, intermediate, output


class _OwnLinear:
    """The same product by the kernels' own narrow one: "bf16" (bfloat16 values, float32 sums;
    AVX-512 BF16) or "int8" (8-bit codes, integer sums; AVX-512 VNNI)."""

    def __init__(self, linear: _Linear, kind: str):
        k = ext()
        self.product = k.bf16_linear if kind == "bf16" else k.int8_linear
        pack = k.bf16_pack if kind == "bf16" else k.int8_pack
        self.packed, self.n, self.bias = pack(linear.weight), linear.weight.shape[0], linear.bias

    def __call__(self, x: mx.array, residual: mx.array | None = None) -> mx.array:
        return self.product(x, self.packed, self.n, self.bias, residual)


def own_product(precision: str) -> bool:
    """Whether this build of the kernels has its own ``precision`` product ("bf16", "int8")."""
    k = ext()
    return precision == "bf16" and k.bf16_available() or precision == "int8" and k.int8_available()


def set_products(encoder: nn.Module, precision: str, ggml_type: int | None) -> None:
    """Every layer's products in float32 ("f32"), or ``precision``'s: the kernels' own where this
    build has it, else ggml's ``ggml_type``."""
    own = own_product(precision)
    if precision != "f32" and not own and ggml_type is None:
        raise ValueError(f"{precision} products need the kernels' own or a ggml type")
    for layer in encoder.encoder.layer:
        products = _products(layer)
        if precision == "f32":
            layer._kernel_products = products
        elif own:
            layer._kernel_products = tuple(_OwnLinear(p, precision) for p in products)
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
    a = K.attention(*heads, attn.scale, False, 0, None, True, segments)
    a = layer.attention.output.LayerNorm(attn_out(a, h))
    inner = intermediate(a)
    inner = K.gelu(inner, _GELU[act]) if act in _GELU else layer.intermediate._act(inner)
    return layer.output.LayerNorm(output(inner, a))


def apply(encoder: nn.Module) -> dict[str, int]:
    set_products(encoder, "f32", None)
    counts = swap_leaf_modules(encoder)
    install(encoder, KernelEncoder)
    counts["packed_encoder"] = 1
    return counts
