"""What a loaded model occupies, read off the arrays and caches it really holds;
derived from ``config.json`` only when a one-token forward cannot drive it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ..loading.traits import config_value
from ..mlx_typed import flatten

__all__ = ["KV_STEP", "ModelMemoryFacts", "facts_from_model"]

#: mlx-lm's ``KVCache.step``: caches grow in this many tokens.
KV_STEP = 256


@dataclass(frozen=True)
class ModelMemoryFacts:
    """One entry per leaf cache of ``make_prompt_cache(model)``: bytes one token adds,
    the window (None: full) and fixed state bytes (recurrent layers)."""

    weights_bytes: int
    kv_bytes_per_token_per_layer: tuple[int, ...]
    window_per_layer: tuple[int | None, ...]
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    num_attention_heads: int
    activation_bytes: int
    state_bytes_per_layer: tuple[int, ...] = ()
    kv_step: int = KV_STEP
    source: str = "probe"  # or "config"
    blockwise_attention: bool = False  # attention never holds a prefill chunk's whole score matrix (the CPU kernels)

    def __post_init__(self) -> None:
        if len(self.kv_bytes_per_token_per_layer) != len(self.window_per_layer):
            raise ValueError("one window per layer is required")
        if self.state_bytes_per_layer and len(self.state_bytes_per_layer) != len(self.window_per_layer):
            raise ValueError("one state size per layer is required")
        if self.kv_step < 1:
            raise ValueError("kv_step must be positive")

    @property
    def num_layers(self) -> int:
        return len(self.kv_bytes_per_token_per_layer)

    @property
    def state_bytes(self) -> int:
        return sum(self.state_bytes_per_layer)


def _leaf_caches(caches: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for cache in caches:
        inner = getattr(cache, "caches", None)
        if isinstance(inner, (list, tuple)) and inner:
            out.extend(_leaf_caches(inner))
        else:
            out.append(cache)
    return out


def _first_array(value: Any) -> mx.array | None:
    if isinstance(value, mx.array):
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _first_array(item)
            if found is not None:
                return found
    return None


def _window(cache: Any) -> int | None:
    size = getattr(cache, "max_size", None)
    return int(size) if isinstance(size, int) and size > 0 else None


def _cache_nbytes(cache: Any) -> int:
    try:
        return int(cache.nbytes)
    except Exception:  # noqa: BLE001 - caches without nbytes: count their state arrays
        return sum(v.nbytes for v in _state_arrays(cache))


def _state_arrays(cache: Any) -> list[mx.array]:
    try:
        state = cache.state
    except Exception:  # noqa: BLE001 - an empty cache may refuse to give its state
        return []
    return [v for _, v in flatten(state) if isinstance(v, mx.array)]


def activation_dtype(model: nn.Module) -> mx.Dtype:
    """The floating dtype most parameters hold (quantized models: their scales): what
    activations, and float KV, run in."""
    counts: dict[mx.Dtype, int] = {}
    for _, v in flatten(model.parameters()):
        if mx.issubdtype(v.dtype, mx.floating):
            counts[v.dtype] = counts.get(v.dtype, 0) + v.size
    if not counts:
        return mx.float32
    return max(counts, key=counts.__getitem__)


def _activation_dtype_bytes(model: nn.Module) -> int:
    return activation_dtype(model).size


def _probe_caches(model: nn.Module, make_caches=None) -> tuple[list[int], list[int | None], list[int], int, int, int]:
    """Per-token bytes, windows, state bytes, activation size, vocabulary and step."""
    from mlx_lm.models.cache import make_prompt_cache

    caches = (make_caches or make_prompt_cache)(model)
    logits = model(mx.array([[0]], dtype=mx.int32), cache=caches)
    leaves = _leaf_caches(caches)
    mx.eval(logits, [_state_arrays(c) for c in leaves])
    per_token: list[int] = []
    windows: list[int | None] = []
    states: list[int] = []
    act_bytes = 0
    step = KV_STEP
    for cache in leaves:
        keys = getattr(cache, "keys", None)
        first = _first_array(keys)
        nbytes = _cache_nbytes(cache)
        if first is None:  # no growing keys/values: a fixed recurrent state
            per_token.append(0)
            windows.append(None)
            states.append(nbytes)
            continue
        tokens = first.shape[-2]
        if tokens < 1 or nbytes % tokens:
            raise ValueError(f"cannot read per-token bytes from {type(cache).__name__}")
        per_token.append(nbytes // tokens)
        windows.append(_window(cache))
        states.append(0)
        if mx.issubdtype(first.dtype, mx.floating):
            act_bytes = max(act_bytes, first.dtype.size)
        step = max(step, int(getattr(cache, "step", KV_STEP) or KV_STEP))
    del caches, leaves
    return per_token, windows, states, act_bytes, int(logits.shape[-1]), step


def _config_caches(model: nn.Module, config: Mapping[str, Any], act_bytes: int) -> tuple[list[int], list[int | None]]:
    """Fallback: ``2 x kv_heads x head_dim x bytes`` per token."""
    from mlx_lm.models.cache import make_prompt_cache

    heads = int(config_value(config, "num_attention_heads", "n_head", default=1))
    kv_heads = int(config_value(config, "num_key_value_heads", "n_kv_heads", default=heads))
    hidden = int(config_value(config, "hidden_size", "d_model", default=0))
    head_dim = int(config_value(config, "head_dim", default=hidden // heads if heads else 0))
    leaves = _leaf_caches(make_prompt_cache(model))
    per_token = 2 * kv_heads * head_dim * act_bytes
    return [per_token] * len(leaves), [_window(c) for c in leaves]


def facts_from_model(model: nn.Module, config: Mapping[str, Any], make_caches=None,
                     blockwise_attention: bool = False) -> ModelMemoryFacts:
    """``make_caches(model)``: the caches requests get (default: mlx-lm's ``make_prompt_cache``);
    ``blockwise_attention``: the model's attention runs in blocks of keys with an online
    softmax (the CPU kernels' attention), so no score matrix is ever whole."""
    weights = sum(v.nbytes for _, v in flatten(model.parameters()))
    weights += sum(getattr(m, "outside_bytes", 0) for _, m in model.named_modules())  # e.g. ggml's weights
    act_bytes = _activation_dtype_bytes(model)
    vocab = int(config_value(config, "vocab_size", default=0))
    step = KV_STEP
    try:
        per_token, windows, states, probed_bytes, probed_vocab, step = _probe_caches(model, make_caches)
        act_bytes = probed_bytes or act_bytes
        vocab = probed_vocab or vocab
        source = "probe"
    except Exception:  # noqa: BLE001 - any architecture the probe cannot drive
        per_token, windows = _config_caches(model, config, act_bytes)
        states = [0] * len(per_token)
        source = "config"
    heads = int(config_value(config, "num_attention_heads", "n_head", default=1))
    hidden = int(config_value(config, "hidden_size", "d_model", "n_embd", default=0))
    inter = config_value(config, "intermediate_size", "ffn_dim", "n_inner", default=None)
    if isinstance(inter, (list, tuple)):
        inter = max(inter) if inter else None
    inter = int(inter) if inter else 4 * hidden
    experts = config_value(config, "num_experts_per_tok", default=None)
    moe_inter = config_value(config, "moe_intermediate_size", default=None)
    if experts and moe_inter:
        inter = max(inter, int(experts) * int(moe_inter))
    return ModelMemoryFacts(
        weights_bytes=int(weights),
        kv_bytes_per_token_per_layer=tuple(int(b) for b in per_token),
        window_per_layer=tuple(windows),
        hidden_size=hidden,
        intermediate_size=inter,
        vocab_size=vocab,
        num_attention_heads=heads,
        activation_bytes=int(act_bytes),
        state_bytes_per_layer=tuple(int(s) for s in states),
        kv_step=step,
        source=source,
        blockwise_attention=blockwise_attention,
    )


def blockwise_attention(loaded) -> bool:
    """Whether a loaded generation model's attention is the CPU kernels' (blocks of keys,
    online softmax): kernels in its attention, float32 activations, no attention sinks."""
    kinds = loaded.kernels
    if not ("fused_attention" in kinds or "scaled_dot_product_attention dispatch" in kinds):
        return False
    if activation_dtype(loaded.model) != mx.float32:
        return False
    return not any("sinks" in module for _, module in loaded.model.named_modules() if isinstance(module, nn.Module))


def with_draft(target: ModelMemoryFacts, draft: ModelMemoryFacts) -> ModelMemoryFacts:
    """A target served with a draft: both weights, both caches, the larger workspace."""
    states = (target.state_bytes_per_layer or (0,) * target.num_layers) + (
        draft.state_bytes_per_layer or (0,) * draft.num_layers)
    return replace(
        target,
        weights_bytes=target.weights_bytes + draft.weights_bytes,
        kv_bytes_per_token_per_layer=target.kv_bytes_per_token_per_layer + draft.kv_bytes_per_token_per_layer,
        window_per_layer=target.window_per_layer + draft.window_per_layer,
        state_bytes_per_layer=states,
        hidden_size=max(target.hidden_size, draft.hidden_size),
        intermediate_size=max(target.intermediate_size, draft.intermediate_size),
        blockwise_attention=target.blockwise_attention and draft.blockwise_attention)
