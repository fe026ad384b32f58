"""Memory plans computed from facts about the loaded model and this machine.

Port of the seed's ``contracts/portable/memory-plan.ts`` (``MemoryPlan``), with
the accounting behind it. Every figure comes from something measured:

* weights: the ``nbytes`` of the arrays the model actually holds;
* KV cache: per layer, the bytes one token occupies in that layer's real cache
  object (read off a one-token forward through a fresh ``make_prompt_cache``),
  the layer's sliding window (``RotatingKVCache.max_size``), and the 256-token
  steps mlx-lm's caches grow in;
* transient workspace: one prefill chunk's activations and attention scores, the
  logits of the positions actually sampled, and the copies cache growth makes;
* usable memory: the process's memory limit (cgroup, Metal working set, RAM)
  and what the rest of the machine leaves free;
* decode rate: this machine's measured read bandwidth.

``MemoryGate`` applies the same accounting to admission: a request whose
context can never fit is refused at once; one that is only short for now waits.

No gRPC here: the service maps ``MemoryPlan`` onto ``mlxgrpc.v1.MemoryPlan``.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import psutil
from mlx.utils import tree_flatten

__all__ = [
    "KV_STEP",
    "MIB",
    "STRATEGY",
    "MemoryGate",
    "MemoryPlan",
    "ModelMemoryFacts",
    "Reservation",
    "allocator_cache_limit",
    "default_reserve",
    "facts_from_model",
    "kv_bytes",
    "kv_read_bytes",
    "measure_read_bandwidth",
    "plan_memory",
    "transient_bytes",
    "usable_memory",
]

MIB = 1 << 20
#: mlx-lm's ``KVCache.step`` / ``RotatingKVCache.step``: caches grow in this many tokens.
KV_STEP = 256
#: Names the accounting below (``MemoryPlan.strategy``); informational.
STRATEGY = "mlx-kv-cache/v1"
#: Upper end of the ``max_safe_context`` search (a model whose every layer is a
#: sliding window only grows through its attention scores).
_MAX_CONTEXT_SEARCH = 1 << 40
_SCORE_BYTES = 4  # attention scores and logits are materialized in float32
_EMPTY: Mapping[str, int] = MappingProxyType({})


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class MemoryPlan:
    """Common admission contract (``memory-plan.ts``): what serving consumes.

    ``total_bytes = weights_bytes + kv_bytes + transient_bytes + reserve_bytes``
    and ``fits`` is ``total_bytes <= usable_bytes``. Optional fields are None
    (or empty) when unknown or not reserved.
    """

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
    #: mlx allocator-cache limit, distinct from the process admission limit.
    allocator_limit_bytes: int | None = None
    #: Generated-token allowance reserved within ``context_tokens``; None when none.
    max_generation_tokens: int | None = None
    #: Parts of ``weights_bytes`` held in streaming tiers instead of resident memory.
    streamed_weights: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    #: RAM the plan leaves to the rest of the machine (may be negative when it does not fit).
    machine_headroom_bytes: int | None = None
    schema_version: int = 1

    def figures(self) -> dict[str, str]:
        """The main numbers as strings, e.g. for error metadata (``ErrorInfo``)."""
        out = {
            "fits": "true" if self.fits else "false",
            "context_tokens": str(self.context_tokens),
            "max_safe_context": str(self.max_safe_context),
            "weights_bytes": str(self.weights_bytes),
            "kv_bytes": str(self.kv_bytes),
            "transient_bytes": str(self.transient_bytes),
            "reserve_bytes": str(self.reserve_bytes),
            "total_bytes": str(self.total_bytes),
            "usable_bytes": str(self.usable_bytes),
        }
        if self.max_generation_tokens is not None:
            out["max_generation_tokens"] = str(self.max_generation_tokens)
        if self.predicted_decode_tps is not None:
            out["predicted_decode_tps"] = f"{self.predicted_decode_tps:.2f}"
        if self.machine_headroom_bytes is not None:
            out["machine_headroom_bytes"] = str(self.machine_headroom_bytes)
        return out


# -------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class ModelMemoryFacts:
    """What a loaded model occupies, one entry per cache object of
    ``make_prompt_cache(model)`` (one per layer; a ``CacheList`` contributes one
    entry per member).

    ``kv_bytes_per_token_per_layer[i]`` is the bytes one token adds to layer
    ``i``'s keys plus values (``2 x kv_heads x head_dim x dtype bytes`` for a
    plain cache); ``window_per_layer[i]`` the most tokens the layer stores (a
    ``RotatingKVCache``'s ``max_size``) or None for a full cache;
    ``state_bytes_per_layer[i]`` fixed bytes a layer holds whatever the context
    (recurrent / SSM state; 0 for KV layers).
    """

    weights_bytes: int
    kv_bytes_per_token_per_layer: tuple[int, ...]
    window_per_layer: tuple[int | None, ...]
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    num_attention_heads: int
    activation_bytes: int
    state_bytes_per_layer: tuple[int, ...] = ()
    #: Tokens a cache grows by at once (mlx-lm's ``KVCache.step``).
    kv_step: int = KV_STEP
    #: "probe" (read off real cache objects) or "config" (derived from config.json).
    source: str = "probe"

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


def _cfg(config: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    """First of ``keys`` found in ``config`` or its ``text_config`` (multimodal nesting)."""
    scopes = [config]
    text = config.get("text_config")
    if isinstance(text, Mapping):
        scopes.append(text)
    for scope in scopes:
        for key in keys:
            value = scope.get(key)
            if value is not None:
                return value
    return default


def _leaf_caches(caches: Sequence[Any]) -> list[Any]:
    """Flattens ``CacheList``-style containers (anything with ``.caches``)."""
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
    return [v for _, v in tree_flatten(state) if isinstance(v, mx.array)]


def _activation_dtype_bytes(model: nn.Module) -> int:
    """The floating dtype most parameters hold (quantized models: their scales)."""
    counts: dict[mx.Dtype, int] = {}
    for _, v in tree_flatten(model.parameters()):
        if mx.issubdtype(v.dtype, mx.floating):
            counts[v.dtype] = counts.get(v.dtype, 0) + v.size
    if not counts:
        return 4
    return max(counts, key=counts.__getitem__).size


def _probe_caches(model: nn.Module) -> tuple[list[int], list[int | None], list[int], int, int, int]:
    """One-token forward through a fresh cache; reads what each cache stores.

    Returns per-token bytes, windows, fixed state bytes, the activation dtype's
    size (the keys' dtype), the vocabulary (the logits' last axis) and the step.
    """
    from mlx_lm.models.cache import make_prompt_cache  # noqa: PLC0415

    caches = make_prompt_cache(model)
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
    """Fallback when a forward is not possible: ``2 x kv_heads x head_dim x bytes``."""
    from mlx_lm.models.cache import make_prompt_cache  # noqa: PLC0415

    heads = int(_cfg(config, "num_attention_heads", "n_head", default=1))
    kv_heads = int(_cfg(config, "num_key_value_heads", "n_kv_heads", default=heads))
    hidden = int(_cfg(config, "hidden_size", "d_model", default=0))
    head_dim = int(_cfg(config, "head_dim", default=hidden // heads if heads else 0))
    leaves = _leaf_caches(make_prompt_cache(model))
    per_token = 2 * kv_heads * head_dim * act_bytes
    return [per_token] * len(leaves), [_window(c) for c in leaves]


def facts_from_model(model: nn.Module, config: Mapping[str, Any]) -> ModelMemoryFacts:
    """Facts about a loaded mlx-lm model.

    Weights are the ``nbytes`` of the arrays the model holds (quantized weights,
    scales and biases included). Per-layer KV bytes come from a one-token
    forward through a fresh ``make_prompt_cache(model)``: each cache's
    ``nbytes`` divided by the tokens its keys have room for, so any head count,
    head dimension, dtype, key/value split or quantized cache is read, not
    guessed. Should the forward fail (a model needing other inputs), they are
    derived from ``config`` (``num_key_value_heads``, ``head_dim``, at the
    parameters' floating dtype). Sizes for the transient workspace come from
    ``config`` (``text_config`` nesting handled).
    """
    weights = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    act_bytes = _activation_dtype_bytes(model)
    vocab = int(_cfg(config, "vocab_size", default=0))
    step = KV_STEP
    try:
        per_token, windows, states, probed_bytes, probed_vocab, step = _probe_caches(model)
        act_bytes = probed_bytes or act_bytes
        vocab = probed_vocab or vocab
        source = "probe"
    except Exception:  # noqa: BLE001 - any architecture the probe cannot drive
        per_token, windows = _config_caches(model, config, act_bytes)
        states = [0] * len(per_token)
        source = "config"
    heads = int(_cfg(config, "num_attention_heads", "n_head", default=1))
    hidden = int(_cfg(config, "hidden_size", "d_model", "n_embd", default=0))
    inter = _cfg(config, "intermediate_size", "ffn_dim", "n_inner", default=None)
    if isinstance(inter, (list, tuple)):
        inter = max(inter) if inter else None
    inter = int(inter) if inter else 4 * hidden
    experts = _cfg(config, "num_experts_per_tok", default=None)
    moe_inter = _cfg(config, "moe_intermediate_size", default=None)
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
    )


# ----------------------------------------------------------------------- accounting


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
    # RotatingKVCache grows by min(step, max_size - offset) from wherever the
    # prefill left it, so until the window is full it may hold up to step - 1
    # tokens of room beyond the context; once full it holds exactly max_size.
    return min(tokens + step - 1, window)


def kv_bytes(facts: ModelMemoryFacts, tokens: int, rows: int = 1, *, chunk: int | None = None) -> int:
    """Bytes of KV cache ``rows`` rows of ``tokens`` tokens each occupy.

    mlx-lm's ``KVCache`` allocates in steps of ``facts.kv_step`` (256) tokens, so
    a full-attention layer is charged ``ceil(tokens / 256) * 256`` tokens. That
    is exact when every prefill step but the last is a multiple of 256 tokens
    (or the prompt goes in at once) and decode appends one token at a time —
    ``chunk=None``, the default. With prefill steps of other sizes up to
    ``chunk`` tokens, a growth can start off a step boundary and the buffer may
    hold up to ``round_up(chunk, 256) - 1`` tokens beyond the context; pass
    ``chunk`` to be charged that bound instead.

    A sliding-window layer (``RotatingKVCache``) stores at most its window:
    it is charged ``min(tokens + 255, window)`` (exact once the window is full;
    an upper bound before, as growth steps start wherever the prefill stopped).
    Its overshoot while a chunk is appended is transient (``transient_bytes``).
    Fixed recurrent state (``state_bytes_per_layer``) is included per row.
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
    """Bytes of KV one decode step reads for one row at ``tokens`` of context:
    the tokens attended (a window's worth at most), not the buffer's room."""
    return facts.state_bytes + sum(
        per_token * (tokens if window is None else min(tokens, window))
        for per_token, window in zip(facts.kv_bytes_per_token_per_layer, facts.window_per_layer)
    )


def transient_bytes(facts: ModelMemoryFacts, chunk: int, context: int, *, rows: int = 1) -> int:
    """Workspace beyond weights and KV while a ``chunk``-token prefill step runs
    at ``context`` tokens (and while a decode step of ``rows`` rows runs).

    Terms (``c = min(chunk, context)``, at least 1):

    * activations: ``c x (4 x hidden + 3 x intermediate) x activation bytes``:
      residual stream, normed input, queries and attention output (4 x hidden);
      gate, up and their product in the MLP (3 x intermediate);
    * attention scores: ``c x context x heads x 4`` bytes, the float32 score
      matrix an unfused (fallback) attention materializes for the chunk;
    * logits: ``rows x vocab x 4`` bytes, for the last position of each row
      only (mlx evaluates lazily; the engine never evaluates a prefill chunk's
      other logits);
    * cache growth: ``rows x`` the largest single layer's KV buffer at
      ``context`` — a ``KVCache`` grows by concatenating its old buffer into a
      new one, layer by layer, so one layer's old copy is alive at once
      (measured: the peak of a growth step is one layer's buffer plus the step);
    * sliding-window overshoot: while a chunk is appended a ``RotatingKVCache``
      holds up to ``window - 1 + c`` tokens before trimming to its window; the
      room beyond what ``kv_bytes`` charges is counted here.
    """
    if chunk < 1 or context < 0 or rows < 1:
        raise ValueError("chunk and rows must be positive, context non-negative")
    c = max(1, min(chunk, context))
    activations = c * (4 * facts.hidden_size + 3 * facts.intermediate_size) * facts.activation_bytes
    scores = c * context * facts.num_attention_heads * _SCORE_BYTES
    logits = rows * facts.vocab_size * _SCORE_BYTES
    growth = 0
    overshoot = 0
    for per_token, window in zip(facts.kv_bytes_per_token_per_layer, facts.window_per_layer):
        stored = _stored_tokens(facts, context, window, None)
        growth = max(growth, rows * per_token * stored)
        if window is not None:
            overshoot += per_token * max(0, min(context, window - 1 + c) - stored)
    return activations + scores + logits + growth + overshoot


# ------------------------------------------------------------------------- machine


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _cgroup_mounts() -> tuple[str | None, str | None]:
    """Mount points of the cgroup v2 hierarchy and the v1 memory controller."""
    v2 = v1 = None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if " - " not in line:
                    continue
                sep = parts.index("-")
                fstype, options = parts[sep + 1], parts[-1]
                if fstype == "cgroup2" and v2 is None:
                    v2 = parts[4]
                elif fstype == "cgroup" and "memory" in options.split(",") and v1 is None:
                    v1 = parts[4]
    except OSError:
        pass
    return v2, v1


def _cgroup_dirs(mount: str, rel: str) -> list[str]:
    """The process's cgroup directory and its ancestors under ``mount`` (limits
    are hierarchical); with a cgroup namespace the path may not exist, leaving the root."""
    dirs = []
    rel = rel.strip("/")
    while True:
        path = os.path.join(mount, rel) if rel else mount
        if os.path.isdir(path):
            dirs.append(path)
        if not rel:
            return dirs
        rel = os.path.dirname(rel)


def _cgroup_memory() -> tuple[int | None, int | None]:
    """(limit, bytes others in the cgroup hold that cannot be reclaimed), or Nones."""
    if not sys.platform.startswith("linux"):
        return None, None
    v2_rel = v1_rel = None
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            for line in f:
                hid, controllers, path = line.rstrip("\n").split(":", 2)
                if hid == "0" and controllers == "":
                    v2_rel = path
                elif "memory" in controllers.split(","):
                    v1_rel = path
    except (OSError, ValueError):
        return None, None
    v2_mount, v1_mount = _cgroup_mounts()
    best: tuple[int, str, str, str] | None = None  # (limit, dir, usage file, stat key)
    candidates: list[tuple[str, str, str, str]] = []
    if v2_mount and v2_rel is not None:
        candidates += [(d, "memory.max", "memory.current", "inactive_file") for d in _cgroup_dirs(v2_mount, v2_rel)]
    if v1_mount and v1_rel is not None:
        candidates += [(d, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
                       for d in _cgroup_dirs(v1_mount, v1_rel)]
    for directory, limit_file, usage_file, stat_key in candidates:
        limit = _read_int(os.path.join(directory, limit_file))
        if limit is None or limit >= 1 << 60:  # v1 "unlimited" is a page-rounded 2**63
            continue
        if best is None or limit < best[0]:
            best = (limit, directory, usage_file, stat_key)
    if best is None:
        return None, None
    limit, directory, usage_file, stat_key = best
    usage = _read_int(os.path.join(directory, usage_file))
    if usage is None:
        return limit, None
    inactive = 0
    try:
        with open(os.path.join(directory, "memory.stat"), encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == stat_key:
                    inactive = int(value)
    except (OSError, ValueError):
        pass
    return limit, max(0, usage - inactive)


def _metal_working_set() -> int | None:
    try:
        if not mx.metal.is_available():
            return None
        info = mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info()
        size = int(info["max_recommended_working_set_size"])
        return size if size > 0 else None
    except Exception:  # noqa: BLE001 - older mlx, other backends
        return None


def usable_memory() -> tuple[int, int]:
    """(usable_bytes, limit_bytes): what this process may use for the model now,
    and the most it could ever get on this machine.

    ``limit`` is the smallest of physical RAM (``psutil.virtual_memory().total``),
    the process's cgroup memory limit (v2 ``memory.max`` or v1
    ``memory.limit_in_bytes``, this cgroup or an ancestor) and, on Apple silicon,
    Metal's ``max_recommended_working_set_size``.

    ``usable = min(limit, available + own RSS)``: ``available`` is what the rest
    of the machine leaves free (it already excludes other processes' memory and
    counts reclaimable page cache as free); this process's own resident memory —
    the loaded weights above all — is added back, because a plan counts the
    weights itself and must not subtract them twice. Inside a memory-limited
    cgroup, others in the same cgroup are subtracted too: ``limit - (usage -
    inactive file cache) + own RSS``. The figure is taken once the weights are
    loaded; memory others free or take later changes it.
    """
    vm = psutil.virtual_memory()
    limit = int(vm.total)
    metal = _metal_working_set()
    if metal is not None:
        limit = min(limit, metal)
    rss = int(psutil.Process().memory_info().rss)
    usable = int(vm.available) + rss
    cg_limit, cg_used = _cgroup_memory()
    if cg_limit is not None:
        limit = min(limit, cg_limit)
        if cg_used is not None:
            usable = min(usable, cg_limit - cg_used + rss)
    return max(0, min(limit, usable)), limit


@functools.lru_cache(maxsize=8)
def measure_read_bandwidth(nbytes: int = 256 * MIB) -> float:
    """Bytes per second this device reads: the best of a few timed ``mx.sum``
    reductions over a ``nbytes`` float32 array already in memory. Cached per size
    (the first call allocates ``nbytes`` and takes about a second)."""
    n = max(1, nbytes // 4)
    data = mx.random.uniform(shape=(n,), dtype=mx.float32)
    mx.eval(data)
    mx.eval(mx.sum(data))  # warm-up: kernels, page faults
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        mx.eval(mx.sum(data))
        best = min(best, time.perf_counter() - start)
    del data
    mx.clear_cache()
    return (n * 4) / best if best > 0 else 0.0


_cache_limit_lock = threading.Lock()


def allocator_cache_limit() -> int | None:
    """mlx's allocator-cache limit (``mx.set_cache_limit``), or None when it
    cannot be read. mlx has no getter: the limit is read by raising it for an
    instant (raising frees nothing) and restoring it."""
    try:
        with _cache_limit_lock:
            previous = mx.set_cache_limit(1 << 62)
            mx.set_cache_limit(previous)
        return int(previous)
    except Exception:  # noqa: BLE001
        return None


def default_reserve(usable: int) -> int:
    """Safety reserve: the larger of 256 MiB and 5% of usable memory."""
    return max(256 * MIB, usable // 20)


# ---------------------------------------------------------------------------- plan


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
) -> MemoryPlan:
    """The memory ``rows`` rows of ``context_tokens`` tokens (prompt plus
    ``max_generation_tokens`` of output) need on this machine.

    ``total = weights + kv + transient + reserve``; ``fits = total <= usable``.
    ``usable`` (and ``machine_total``) default to ``usable_memory()``; the
    reserve to ``default_reserve(usable)``; ``bandwidth`` to the measured read
    bandwidth (``measure_read_bandwidth()``, cached).

    * ``max_safe_context``: the largest context (per row) whose total fits,
      found by binary search; 0 when not even an empty context fits. It is not
      capped by the model's trained context length: that cap is the caller's.
    * ``predicted_decode_tps``: single-stream bandwidth / bytes one decode step
      reads (the weights plus the KV attended at ``context_tokens``).
    * ``machine_headroom_bytes``: ``machine_total - total``, the RAM the plan
      leaves to the rest of the machine (negative: it would push others out);
      None when ``usable`` is given without ``machine_total``.
    * ``allocator_limit_bytes``: mlx's allocator-cache limit, if readable.
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
    if bandwidth is None:
        try:
            bandwidth = measure_read_bandwidth()
        except Exception:  # noqa: BLE001 - no measurement, no prediction
            bandwidth = None
    read = facts.weights_bytes + kv_read_bytes(facts, context_tokens)
    tps = bandwidth / read if bandwidth and read > 0 else None
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


# ---------------------------------------------------------------------------- gate


class Reservation:
    """Memory held for one admitted request; ``release()`` is idempotent.
    Usable as a context manager (released on exit)."""

    __slots__ = ("_gate", "_released", "tokens")

    def __init__(self, gate: MemoryGate, tokens: int):
        self._gate = gate
        self.tokens = tokens
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        self._gate._release(self)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


class MemoryGate:
    """Admission by memory: tracks what running requests have committed.

    The budget is ``usable - weights - reserve``. A set of running requests
    costs its KV cache plus one transient workspace (only one prefill step runs
    at a time) sized for the longest of them. With ``padded_batch`` (the default)
    the KV is charged as the engine's decode batch stores it: mlx-lm's
    ``BatchKVCache`` left-pads every row to the longest, so ``n`` rows cost
    ``n x`` the longest row's cache; without it each row is charged its own.

    ``would_ever_fit(tokens)`` says whether the request could run alone (it
    agrees with ``plan_memory(...).fits`` for the same usable memory and
    reserve): refuse at once when it cannot. ``try_reserve(tokens)`` commits
    the request's memory if it fits beside the running ones, else returns None
    (the request waits; it never fits when ``would_ever_fit`` is False).
    Thread-safe: the engine thread and the event loop may both call it.
    """

    def __init__(
        self,
        facts: ModelMemoryFacts,
        *,
        usable: int | None = None,
        reserve_bytes: int | None = None,
        prefill_chunk: int = 256,
        padded_batch: bool = True,
    ):
        if prefill_chunk < 1:
            raise ValueError("prefill_chunk must be positive")
        if usable is None:
            usable, _ = usable_memory()
        self.facts = facts
        self.usable_bytes = int(usable)
        self.reserve_bytes = default_reserve(self.usable_bytes) if reserve_bytes is None else int(reserve_bytes)
        self.budget_bytes = self.usable_bytes - facts.weights_bytes - self.reserve_bytes
        self.prefill_chunk = prefill_chunk
        self.padded_batch = padded_batch
        self._lock = threading.Lock()
        self._held: list[Reservation] = []

    def _cost(self, tokens: Sequence[int]) -> int:
        if not tokens:
            return 0
        longest = max(tokens)
        chunk = _kv_chunk(self.facts, self.prefill_chunk)
        if self.padded_batch:
            kv = kv_bytes(self.facts, longest, len(tokens), chunk=chunk)
        else:
            kv = sum(kv_bytes(self.facts, t, chunk=chunk) for t in tokens)
        return kv + transient_bytes(self.facts, self.prefill_chunk, longest, rows=len(tokens))

    def cost(self, tokens: Sequence[int]) -> int:
        """Bytes beyond weights and reserve that requests of these contexts need together."""
        return self._cost(list(tokens))

    def would_ever_fit(self, tokens: int) -> bool:
        """Whether a request of ``tokens`` context fits with nothing else running."""
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        return self.budget_bytes >= 0 and self._cost([tokens]) <= self.budget_bytes

    @property
    def max_context(self) -> int:
        """The longest context a request running alone may have."""
        if self.budget_bytes < 0:
            return 0
        return _max_context(self.facts, self.budget_bytes, self.prefill_chunk, 1)

    def try_reserve(self, tokens: int) -> Reservation | None:
        """Commits memory for a request of ``tokens`` context, or None if it does
        not fit beside what is committed now."""
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        with self._lock:
            if self.budget_bytes < 0:
                return None
            if self._cost([r.tokens for r in self._held] + [tokens]) > self.budget_bytes:
                return None
            reservation = Reservation(self, tokens)
            self._held.append(reservation)
            return reservation

    def _release(self, reservation: Reservation) -> None:
        with self._lock:
            if reservation._released:
                return
            reservation._released = True
            for i, held in enumerate(self._held):
                if held is reservation:
                    del self._held[i]
                    break

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._held)

    @property
    def committed_bytes(self) -> int:
        with self._lock:
            return self._cost([r.tokens for r in self._held])

    @property
    def available_bytes(self) -> int:
        """Budget not committed to running requests (may be negative if the budget is)."""
        with self._lock:
            return self.budget_bytes - self._cost([r.tokens for r in self._held])
