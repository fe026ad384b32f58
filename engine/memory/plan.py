"""Memory plans: the bytes a context needs, from ``ModelMemoryFacts`` and this machine.

Invariant: ``total = weights + kv + transient + reserve`` and ``fits = total <= usable``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..hardware.machine import MIB, allocator_cache_limit, measure_matvec_bandwidth, usable_memory
from .facts import ModelMemoryFacts

if TYPE_CHECKING:
    from .calibration import DecodeCalibration

__all__ = ["STRATEGY", "MemoryPlan", "default_reserve", "kv_bytes", "kv_read_bytes", "plan_memory",
           "transient_bytes"]

STRATEGY = "mlx-kv-cache/v1"
_MAX_CONTEXT_SEARCH = 1 << 40
_SCORE_BYTES = 4  # attention scores and logits are materialized in float32
_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True)
class MemoryPlan:
    """The admission contract; optional fields are None (or empty) when unknown."""

    strategy: str
    fits: bool
    context_tokens: int
    max_safe_context: int
    weights_bytes: int
    kv_bytes: int
    transient_bytes: int
    reserve_bytes: int
    total_bytes: int
    usable_bytes: int
    predicted_decode_tps: float | None
    allocator_limit_bytes: int | None = None
    max_generation_tokens: int | None = None
    streamed_weights: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    machine_headroom_bytes: int | None = None
    #: Part of ``weights_bytes`` held by loaded adapters.
    adapter_bytes: int = 0
    schema_version: int = 1

    def figures(self) -> dict[str, str]:
        """The main numbers as strings (error metadata)."""
        out = {"fits": "true" if self.fits else "false"}
        out.update((name, str(getattr(self, name))) for name in (
            "context_tokens", "max_safe_context", "weights_bytes", "kv_bytes", "transient_bytes",
            "reserve_bytes", "total_bytes", "usable_bytes"))
        if self.max_generation_tokens is not None:
            out["max_generation_tokens"] = str(self.max_generation_tokens)
        if self.predicted_decode_tps is not None:
            out["predicted_decode_tps"] = f"{self.predicted_decode_tps:.2f}"
        if self.machine_headroom_bytes is not None:
            out["machine_headroom_bytes"] = str(self.machine_headroom_bytes)
        return out


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def _stored_tokens(facts: ModelMemoryFacts, tokens: int, window: int | None, chunk: int | None) -> int:
    """Tokens of room one layer's buffer holds for a context of ``tokens``."""
    if tokens <= 0:
        return 0
    step = facts.kv_step
    if window is None:
        if chunk is None or chunk % step == 0:
            return _round_up(tokens, step)
        return tokens + _round_up(chunk, step) - 1
    # A rotating cache may hold step - 1 tokens of room until its window is full.
    return min(tokens + step - 1, window)


def kv_bytes(facts: ModelMemoryFacts, tokens: int, rows: int = 1, *, chunk: int | None = None) -> int:
    """Bytes of KV cache ``rows`` rows of ``tokens`` tokens each occupy, recurrent state included.

    Full-attention layers are charged in ``facts.kv_step`` steps (plus up to
    ``round_up(chunk, step) - 1`` when prefill steps are ``chunk`` off-step);
    sliding-window layers ``min(tokens + step - 1, window)``.
    """
    if tokens < 0 or rows < 0:
        raise ValueError("tokens and rows must be non-negative")
    if rows == 0:
        return 0
    per_row = sum(
        per_token * _stored_tokens(facts, tokens, window, chunk)
        for per_token, window in zip(facts.kv_bytes_per_token_per_layer, facts.window_per_layer)
    )
    return rows * (per_row + facts.state_bytes)


def kv_read_bytes(facts: ModelMemoryFacts, tokens: int) -> int:
    """Bytes of KV one decode step reads for one row: the tokens attended, not the buffer's room."""
    return facts.state_bytes + sum(
        per_token * (tokens if window is None else min(tokens, window))
        for per_token, window in zip(facts.kv_bytes_per_token_per_layer, facts.window_per_layer)
    )


def transient_bytes(facts: ModelMemoryFacts, chunk: int, context: int, *, rows: int = 1) -> int:
    """Peak workspace beyond weights and KV while a ``chunk``-token prefill step (or a
    ``rows``-row decode step) runs at ``context`` tokens; with ``c = min(chunk, context)``:
    activations ``c(8 hidden + 4 intermediate)``, float32 scores and mask
    ``c context (4 heads + 1)`` (the mask only, ``c context``, where attention runs in
    blocks of keys), logits ``rows vocab 4``, one layer's KV buffer (growth copies layer
    by layer), and sliding-window room up to ``window - 1 + c``."""

    if chunk < 1 or context < 0 or rows < 1:
        raise ValueError("chunk and rows must be positive, context non-negative")
    c = max(1, min(chunk, context))
    activations = c * (8 * facts.hidden_size + 4 * facts.intermediate_size) * facts.activation_bytes
    scores = c * context * ((0 if facts.blockwise_attention else facts.num_attention_heads * _SCORE_BYTES) + 1)
    logits = rows * facts.vocab_size * _SCORE_BYTES
    growth = 0
    overshoot = 0
    for per_token, window in zip(facts.kv_bytes_per_token_per_layer, facts.window_per_layer):
        stored = _stored_tokens(facts, context, window, None)
        growth = max(growth, rows * per_token * stored)
        if window is not None:
            overshoot += per_token * max(0, min(context, window - 1 + c) - stored)
    return activations + scores + logits + growth + overshoot


def default_reserve(usable: int) -> int:
    """Safety reserve: the larger of 256 MiB and 5% of usable memory."""
    return max(256 * MIB, usable // 20)


def _kv_chunk(facts: ModelMemoryFacts, prefill_chunk: int) -> int | None:
    return None if prefill_chunk % facts.kv_step == 0 else prefill_chunk


def _need(facts: ModelMemoryFacts, context: int, prefill_chunk: int, rows: int) -> int:
    """Bytes beyond weights and reserve for ``rows`` rows of ``context`` tokens."""
    return (kv_bytes(facts, context, rows, chunk=_kv_chunk(facts, prefill_chunk))
            + transient_bytes(facts, prefill_chunk, context, rows=rows))


def _max_context(facts: ModelMemoryFacts, budget: int, prefill_chunk: int, rows: int) -> int:
    """Largest context whose need fits ``budget`` (need is non-decreasing)."""
    if _need(facts, 0, prefill_chunk, rows) > budget:
        return 0
    lo, hi = 0, 1
    while hi < _MAX_CONTEXT_SEARCH and _need(facts, hi, prefill_chunk, rows) <= budget:
        lo, hi = hi, hi * 2
    if hi >= _MAX_CONTEXT_SEARCH and _need(facts, hi, prefill_chunk, rows) <= budget:
        return hi
    while hi - lo > 1:  # need(lo) fits, need(hi) does not
        mid = (lo + hi) // 2
        if _need(facts, mid, prefill_chunk, rows) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def _predicted_decode_tps(facts: ModelMemoryFacts, context: int, bandwidth: float | None,
                          decode: DecodeCalibration | None) -> float | None:
    read = facts.weights_bytes + kv_read_bytes(facts, context)
    if decode is not None:
        return decode.tokens_per_second(read)
    try:
        bandwidth = bandwidth or measure_matvec_bandwidth()
    except Exception:  # noqa: BLE001 - no measurement, no prediction
        return None
    return bandwidth / read if bandwidth and read > 0 else None


def plan_memory(
    facts: ModelMemoryFacts,
    *,
    context_tokens: int,
    max_generation_tokens: int = 0,
    prefill_chunk: int = 256,
    rows: int = 1,
    reserve_bytes: int | None = None,
    usable: int | None = None,
    bandwidth: float | None = None,
    machine_total: int | None = None,
    decode: DecodeCalibration | None = None,
    context_limit: int | None = None,
) -> MemoryPlan:
    """The memory ``rows`` rows of ``context_tokens`` tokens (output included) need here.

    ``usable``/``machine_total`` default to ``usable_memory()``, the reserve to
    ``default_reserve``; ``max_safe_context`` is capped at ``context_limit`` and is
    0 when not even an empty context fits. Raises ValueError on bad counts.
    """

    if context_tokens < 0 or max_generation_tokens < 0:
        raise ValueError("token counts must be non-negative")
    if max_generation_tokens > context_tokens:
        raise ValueError("max_generation_tokens must lie within context_tokens")
    if prefill_chunk < 1 or rows < 1:
        raise ValueError("prefill_chunk and rows must be positive")
    if usable is None:
        usable, measured_total = usable_memory()
        machine_total = measured_total if machine_total is None else machine_total
    reserve = default_reserve(usable) if reserve_bytes is None else int(reserve_bytes)
    kv = kv_bytes(facts, context_tokens, rows, chunk=_kv_chunk(facts, prefill_chunk))
    transient = transient_bytes(facts, prefill_chunk, context_tokens, rows=rows)
    total = facts.weights_bytes + kv + transient + reserve
    budget = usable - facts.weights_bytes - reserve
    max_safe = _max_context(facts, budget, prefill_chunk, rows) if budget >= 0 else 0
    if context_limit is not None:
        max_safe = min(max_safe, context_limit)
    tps = _predicted_decode_tps(facts, context_tokens, bandwidth, decode)
    return MemoryPlan(
        strategy=STRATEGY,
        fits=total <= usable,
        context_tokens=int(context_tokens),
        max_safe_context=int(max_safe),
        weights_bytes=int(facts.weights_bytes),
        kv_bytes=int(kv),
        transient_bytes=int(transient),
        reserve_bytes=int(reserve),
        total_bytes=int(total),
        usable_bytes=int(usable),
        predicted_decode_tps=tps,
        allocator_limit_bytes=allocator_cache_limit(),
        max_generation_tokens=int(max_generation_tokens) if max_generation_tokens else None,
        machine_headroom_bytes=None if machine_total is None else int(machine_total - total),
    )
