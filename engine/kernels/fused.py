"""Fused attention and MLP blocks for mlx-lm's Llama-family layers (llama, qwen2, qwen3).

Invariant: q/k/v and gate/up weights are concatenated at load where they share a layout
(originals dropped; each fused layer records in ``fused_from`` the layers it replaced),
and otherwise stay separate layers whose outputs are concatenated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import scaled_dot_product_attention

from ..layering import KERNEL, install
from ..loading.traits import FUSED_FAMILIES
from . import ext, kv_append, ops, whole_layer

if TYPE_CHECKING:  # the class FusedBlock is installed on (a Llama-family TransformerBlock), as the checker sees it
    _BlockHost = nn.Module
else:  # at run time a plain mixin
    _BlockHost = object

# (module, class) of the stock blocks whose __call__ these reproduce.
ATTENTION = {(f"mlx_lm.models.{f}", "Attention") for f in FUSED_FAMILIES}
MLP = {(f"mlx_lm.models.{f}", "MLP") for f in FUSED_FAMILIES}
BLOCK = {(f"mlx_lm.models.{f}", "TransformerBlock") for f in FUSED_FAMILIES}


def _project(layer: nn.Module, x: mx.array, residual: mx.array | None = None,
             norm: tuple[mx.array, float] | None = None, silu_gate: bool = False) -> mx.array:
    """layer(prologue(x)) (+ residual): one primitive where ``ops.project`` applies and the
    layer computes only its weights (an adapted layer is called as it is)."""
    if ops.plain_layer(layer):
        y = ops.project(layer, x, residual, norm, silu_gate)
        if y is not None:
            return y
    if norm is not None:
        x = ext().rms_norm(x, *norm)
    if silu_gate:
        x = ext().silu_gate_halves(x)
    y = layer(x)
    return y if residual is None else residual + y


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


def _concatenated(layers: list[nn.Module], x: mx.array, norm: tuple[mx.array, float] | None) -> mx.array:
    """The layers' outputs side by side (each with the same prologue)."""
    if len(layers) == 1:
        return _project(layers[0], x, norm=norm)
    return mx.concatenate([_project(layer, x, norm=norm) for layer in layers], axis=-1)


class FusedAttention(nn.Module):
    """q, k and v as one product where their weights share a layout, else as three."""

    def __init__(self, attn: nn.Module, rope: ops.RopeSpec, qkv: nn.Module | None):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.scale = attn.n_heads, attn.n_kv_heads, attn.scale
        self.head_dim = attn.q_proj.weight.shape[0] // self.n_heads
        if qkv is not None:
            self.qkv_proj = qkv
        else:
            self.q_proj, self.k_proj, self.v_proj = attn.q_proj, attn.k_proj, attn.v_proj
        self.o_proj = attn.o_proj
        if "q_norm" in attn:
            self.q_norm, self.k_norm = attn.q_norm, attn.k_norm
        self._rope = rope

    def qkv_layers(self) -> list[nn.Module]:
        return [self["qkv_proj"]] if "qkv_proj" in self else [self["q_proj"], self["k_proj"], self["v_proj"]]

    def __call__(self, x: mx.array, mask=None, cache=None, residual: mx.array | None = None,
                 norm: tuple[mx.array, float] | None = None) -> mx.array:
        B, L, _ = x.shape
        rope = self._rope
        norms = (self["q_norm"]["weight"], self["k_norm"]["weight"], self["q_norm"].eps) if "q_norm" in self else (
            None, None, 0.0)
        offsets = rope.offsets(cache.offset if cache is not None else 0)
        args = (_concatenated(self.qkv_layers(), x, norm), self.n_heads, self.n_kv_heads, self.head_dim, rope.dims,
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
    """gate and up as one product where their weights share a layout, else as two."""

    def __init__(self, mlp: nn.Module, gate_up: nn.Module | None):
        super().__init__()
        if gate_up is not None:
            self.gate_up_proj = gate_up
        else:
            self.gate_proj, self.up_proj = mlp.gate_proj, mlp.up_proj
        self.down_proj = mlp.down_proj

    def gate_up_layers(self) -> list[nn.Module]:
        return [self["gate_up_proj"]] if "gate_up_proj" in self else [self["gate_proj"], self["up_proj"]]

    def __call__(self, x: mx.array, residual: mx.array | None = None,
                 norm: tuple[mx.array, float] | None = None) -> mx.array:
        gate_up = _concatenated(self.gate_up_layers(), x, norm)
        return _project(self["down_proj"], gate_up, residual, silu_gate=True)


class FusedBlock(_BlockHost):
    """A Llama-family TransformerBlock in four linear primitives (norms as prologues, residuals inside)."""

    RANK = KERNEL

    def __call__(self, x: mx.array, mask=None, cache=None) -> mx.array:
        out = whole_layer.call(self, x, mask, cache)
        if out is not None:
            return out
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
    named = {"q_proj": attn.q_proj, "k_proj": attn.k_proj, "v_proj": attn.v_proj}
    qkv = fuse_linears(named)
    if qkv is None and not _separable(named):
        return None
    return FusedAttention(attn, rope, qkv)


def _fused_mlp(mlp: nn.Module) -> FusedMLP | None:
    if _key(mlp) not in MLP:
        return None
    named = {"gate_proj": mlp.gate_proj, "up_proj": mlp.up_proj}
    gate_up = fuse_linears(named)
    if gate_up is None and not _separable(named):
        return None
    return FusedMLP(mlp, gate_up)


def _separable(named: dict[str, nn.Module]) -> bool:
    """Whether layers that cannot be concatenated each take a kernel product (float32 or
    quantized weights the kernels read), so their outputs can be."""
    return all(ops.plain_layer(layer) and ops.product(layer) is not None for layer in named.values())


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
