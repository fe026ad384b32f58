"""A fused block as one primitive (``decoder_layer``) where everything in it is plain:
float32 activations, kernel products for every projection, mlx-lm's float KV cache with
room for the new tokens, and a mask the attention kernel takes.

Invariant: the cache is left as ``kv_append.advance`` leaves it, and the result is the
separate primitives' bit for bit; in any other case ``call`` returns None and the block
runs as those primitives."""

from __future__ import annotations

import operator

import mlx.core as mx

from . import ext, kv_append, ops

F32 = mx.float32


def _spec_of(product: ops.Product) -> tuple[int, int, bool]:
    bits, group = (product.quant[4], product.quant[3]) if product.quant is not None else (0, 0)
    return bits, group, product.bias is not None


def _arrays_of(product: ops.Product) -> list:
    arrays = list(product.quant[:3]) if product.quant is not None else [product.weight]
    return arrays if product.bias is None else [*arrays, product.bias]


def _parts(block) -> tuple[list, list, list, list, list]:
    """(norms, qkv, o, gate_up, down): the block's leaf modules, norms first (q and k's last)."""
    attn, mlp = block["self_attn"], block["mlp"]
    norms = [block["input_layernorm"], block["post_attention_layernorm"]]
    if "q_norm" in attn:
        norms += [attn["q_norm"], attn["k_norm"]]
    return norms, attn.qkv_layers(), [attn["o_proj"]], mlp.gate_up_layers(), [mlp["down_proj"]]


_BLOCK_KEYS = ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")
_ATTN_KEYS = ("qkv_proj", "q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")
_MLP_KEYS = ("gate_up_proj", "gate_proj", "up_proj", "down_proj")
_LEAF_KEYS = ("weight", "scales", "biases", "bias")


def _watched(block, parts: tuple) -> tuple[list, list, list, list, list]:
    """What a plan is made of, as (dicts, keys, values, leaves, classes): every module and
    array ``_parts`` reads (or its absence), and each leaf's class, compared by identity."""
    attn, mlp = block["self_attn"], block["mlp"]
    dicts: list[dict] = []
    keys: list[str] = []
    for d, names in ((block, _BLOCK_KEYS), (attn, _ATTN_KEYS), (mlp, _MLP_KEYS)):
        dicts += [d] * len(names)
        keys += names
    leaves = [leaf for group in parts for leaf in group]
    for leaf in leaves:
        dicts += [leaf] * len(_LEAF_KEYS)
        keys += _LEAF_KEYS
    return dicts, keys, list(map(dict.get, dicts, keys)), leaves, list(map(type, leaves))


def plan(block):
    """The block's ``LayerWeights``, or None where a projection is not plain or a norm not
    float32; kept on the block while the modules, arrays and leaf classes it was made from
    stay the same (checked with C-level maps: this runs for every layer of every step)."""
    kept = block.__dict__.get("_layer_plan")
    if kept is not None:
        dicts, keys, values, leaves, classes, made = kept
        if (all(map(operator.is_, map(dict.get, dicts, keys), values))
                and all(map(operator.is_, map(type, leaves), classes))):
            return made
    parts = _parts(block)
    made = _make(block, parts)
    block.__dict__["_layer_plan"] = (*_watched(block, parts), made)
    return made


def _make(block, parts: tuple):
    norms, *groups = parts
    if any(n["weight"].dtype != F32 for n in norms) or not all(ops.plain_layer(x) for g in groups for x in g):
        return None
    products = _all_present([[ops.product(layer) for layer in g] for g in groups])
    if products is None:
        return None
    qkv, (o,), gate_up, (down,) = products
    attn = block["self_attn"]
    rope, qk_norm = attn._rope, len(norms) == 4
    weights = [norms[0]["weight"]]
    for p in qkv:
        weights += _arrays_of(p)
    weights += [n["weight"] for n in norms[2:]]
    weights += [rope.inv_freqs, *_arrays_of(o), norms[1]["weight"]]
    for p in gate_up:
        weights += _arrays_of(p)
    weights += _arrays_of(down)
    return ext().LayerWeights(
        weights, [_spec_of(p) for p in qkv], _spec_of(o), [_spec_of(p) for p in gate_up], _spec_of(down),
        float(norms[0].eps), float(norms[1].eps), attn.n_heads, attn.n_kv_heads, attn.head_dim, qk_norm,
        float(norms[2].eps) if qk_norm else 0.0, rope.dims, rope.traditional, float(rope.scale), float(attn.scale))


def _all_present(groups: list[list[ops.Product | None]]) -> list[list[ops.Product]] | None:
    """``groups`` where every product is there (None: one is not)."""
    present = [[p for p in g if p is not None] for g in groups]
    return present if all(len(p) == len(g) for p, g in zip(present, groups)) else None


def call(block, x: mx.array, mask, cache) -> mx.array | None:
    """block(x, mask, cache) as one primitive, or None where that does not apply."""
    if x.dtype != F32 or x.ndim != 3 or cache is None or not kv_append.has_room(cache, x.shape[1]):
        return None
    taken = ops.kernel_mask(mask)
    if taken is None:
        return None
    layer = plan(block)
    if layer is None:
        return None
    L = x.shape[1]
    offsets = block["self_attn"]._rope.offsets(cache.offset)
    out, keys, values, after = ext().decoder_layer(x, layer, offsets, cache.keys, cache.values,
                                                   kv_append.position(cache), *taken)
    kv_append.advance(cache, keys, values, offsets, after, L)
    return out
