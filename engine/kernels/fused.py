"""Fused attention and MLP blocks for mlx-lm's Llama-family layers (llama, qwen2, qwen3).

Invariant: q/k/v and gate/up weights are concatenated at load (originals dropped), and each
fused layer records in ``fused_from`` the layers it replaced."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import scaled_dot_product_attention

from . import ext, kv_append, ops
from ..layering import KERNEL, install, layers_of, only_kernels
from ..loading.traits import FUSED_FAMILIES

# (module, class) of the stock blocks whose __call__ these reproduce.
ATTENTION = {(f"mlx_lm.models.{f}", "Attention") for f in FUSED_FAMILIES}
MLP = {(f"mlx_lm.models.{f}", "MLP") for f in FUSED_FAMILIES}
BLOCK = {(f"mlx_lm.models.{f}", "TransformerBlock") for f in FUSED_FAMILIES}


_PLAIN_CALLS = {nn.Linear.__call__, nn.QuantizedLinear.__call__}


def _project(layer: nn.Module, x: mx.array, residual: mx.array | None = None,
             norm: tuple[mx.array, float] | None = None, silu_gate: bool = False) -> mx.array:
    """layer(prologue(x)) (+ residual): one primitive where ``ops.project`` applies and the
    layer computes only its weights (an adapted layer is called as it is)."""
    if _plain(layer):
        y = ops.project(layer, x, residual, norm, silu_gate)
        if y is not None:
            return y
    if norm is not None:
        x = ext().rms_norm(x, *norm)
    if silu_gate:
        x = ext().silu_gate_halves(x)
    y = layer(x)
    return y if residual is None else residual + y


_plain_classes: dict[type, bool] = {}


def _plain(layer: nn.Module) -> bool:
    """Whether the layer computes only its weights (its class says: layering makes one per mixin set)."""
    cls = type(layer)
    known = _plain_classes.get(cls)
    if known is None:
        known = _plain_classes[cls] = only_kernels(layer) and layers_of(layer)[0].__call__ in _PLAIN_CALLS
    return known


@dataclass(frozen=True)
class FusedFrom:
    """What a fused layer replaced: (name, output width) in column order."""

    parts: tuple[tuple[str, int], ...]


def fuse_linears(named: dict[str, nn.Module]) -> nn.Module | None:
    """One layer computing all of ``named``'s layers (outputs concatenated in order), or None."""
    layers = list(named.values())
    kinds = {type(layer) for layer in layers}
    with_bias = {"bias" in layer for layer in layers}
    if len(kinds) != 1 or len(with_bias) != 1:
        return None
    cls = kinds.pop()
    fused = cls.__new__(cls)
    nn.Module.__init__(fused)
    if cls is nn.Linear:
        if any(layer.weight.dtype != mx.float32 for layer in layers):
            return None
        fused.weight = mx.concatenate([layer.weight for layer in layers], axis=0)
    elif cls is nn.QuantizedLinear:
        if len({(lay.group_size, lay.bits, lay.mode) for lay in layers}) != 1 or not all(
                ops.quantizable(lay) for lay in layers):
            return None
        fused.group_size, fused.bits, fused.mode = layers[0].group_size, layers[0].bits, layers[0].mode
        for name in ("weight", "scales", "biases"):
            setattr(fused, name, mx.concatenate([layer[name] for layer in layers], axis=0))
        fused.freeze()
    else:
        return None
    if with_bias.pop():
        fused.bias = mx.concatenate([layer.bias for layer in layers], axis=0)
    mx.eval(fused.parameters())
    fused.fused_from = FusedFrom(tuple((name, layer.weight.shape[0]) for name, layer in named.items()))
    return fused


def _key(module: nn.Module) -> tuple[str, str]:
    return type(module).__module__, type(module).__name__


class FusedAttention(nn.Module):
    def __init__(self, attn: nn.Module, rope: ops.RopeSpec, qkv: nn.Module):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.scale = attn.n_heads, attn.n_kv_heads, attn.scale
        self.head_dim = attn.q_proj.weight.shape[0] // self.n_heads
        self.qkv_proj = qkv
        self.o_proj = attn.o_proj
        if "q_norm" in attn:
            self.q_norm, self.k_norm = attn.q_norm, attn.k_norm
        self._rope = rope

    def __call__(self, x: mx.array, mask=None, cache=None, residual: mx.array | None = None,
                 norm: tuple[mx.array, float] | None = None) -> mx.array:
        B, L, _ = x.shape
        rope = self._rope
        norms = (self["q_norm"]["weight"], self["k_norm"]["weight"], self["q_norm"].eps) if "q_norm" in self else (
            None, None, 0.0)
        offsets = rope.offsets(cache.offset if cache is not None else 0)
        args = (_project(self["qkv_proj"], x, norm=norm), self.n_heads, self.n_kv_heads, self.head_dim, rope.dims,
                rope.traditional, rope.scale, rope.inv_freqs, offsets)
        plain = kv_append.plain(cache)  # mlx-lm's float32 KVCache or BatchKVCache, its buffers made
        if plain and kv_append.has_room(cache, L):  # k and v written into the buffers by the same primitive
            q, keys, values, after = ext().qkv_rope_append(*args, cache.keys, cache.values,
                                                           kv_append.position(cache), *norms)
            kv_append.advance(cache, keys, values, offsets, after, L)
        else:
            q, k, v = ext().qkv_rope(*args, *norms)
            if cache is not None:
                k, v = cache.update_and_fetch(k, v)
            plain = kv_append.plain(cache)
        length = -1
        if plain:  # the buffers as they are (the slices update_and_fetch returned go unused)
            k, v, length = cache.keys, cache.values, kv_append.position(cache)
        if not plain and hasattr(cache, "bits"):
            out = ops.cache_attention(q, cache, scale=self.scale, mask=mask, flat=True)
        else:
            out = ops.attention(q, k, v, scale=self.scale, mask=mask, flat=True, length=length)
        if out is None:
            if length >= 0:
                k, v = k[..., :length, :], v[..., :length, :]
            out = scaled_dot_product_attention(q, k, v, cache=cache, scale=self.scale, mask=mask)
            out = out.transpose(0, 2, 1, 3).reshape(B, L, -1)
        return _project(self["o_proj"], out, residual)


class FusedMLP(nn.Module):
    def __init__(self, gate_up: nn.Module, down: nn.Module):
        super().__init__()
        self.gate_up_proj = gate_up
        self.down_proj = down

    def __call__(self, x: mx.array, residual: mx.array | None = None,
                 norm: tuple[mx.array, float] | None = None) -> mx.array:
        gate_up = _project(self["gate_up_proj"], x, norm=norm)
        return _project(self["down_proj"], gate_up, residual, silu_gate=True)


class FusedBlock:
    """A Llama-family TransformerBlock in four linear primitives (norms as prologues, residuals inside)."""

    RANK = KERNEL

    def __call__(self, x: mx.array, mask=None, cache=None) -> mx.array:
        first, second = self["input_layernorm"], self["post_attention_layernorm"]
        h = self["self_attn"](x, mask, cache, residual=x, norm=(first["weight"], first.eps))
        return self["mlp"](h, residual=h, norm=(second["weight"], second.eps))


def _fused_attention(attn: nn.Module) -> FusedAttention | None:
    rope = ops.rope_spec(attn["rope"]) if isinstance(attn.get("rope"), nn.Module) else None
    if _key(attn) not in ATTENTION or rope is None:
        return None
    norms = [attn.get("q_norm"), attn.get("k_norm")]
    if any(n is not None and type(n) is not nn.RMSNorm for n in norms) or (norms[0] is None) != (norms[1] is None):
        return None
    qkv = fuse_linears({"q_proj": attn.q_proj, "k_proj": attn.k_proj, "v_proj": attn.v_proj})
    return None if qkv is None else FusedAttention(attn, rope, qkv)


def _fused_mlp(mlp: nn.Module) -> FusedMLP | None:
    if _key(mlp) not in MLP:
        return None
    gate_up = fuse_linears({"gate_proj": mlp.gate_proj, "up_proj": mlp.up_proj})
    return None if gate_up is None else FusedMLP(gate_up, mlp.down_proj)


def fuse_blocks(model: nn.Module) -> dict[str, int]:
    """Replaces every eligible ``self_attn`` and ``mlp`` in ``model``; returns counts."""
    counts = {"fused_attention": 0, "fused_mlp": 0, "fused_block": 0}
    for _, module in list(model.named_modules()):
        for name, make, kind in (("self_attn", _fused_attention, "fused_attention"),
                                 ("mlp", _fused_mlp, "fused_mlp")):
            child = module.get(name) if isinstance(module, dict) else None
            if isinstance(child, nn.Module) and (fused := make(child)) is not None:
                setattr(module, name, fused)
                counts[kind] += 1
        if (_key(module) in BLOCK and isinstance(module.get("self_attn"), FusedAttention)
                and isinstance(module.get("mlp"), FusedMLP)):
            install(module, FusedBlock)
            counts["fused_block"] += 1
    return counts
