"""Memory plans from facts: the figures ``engine.memory`` computes are checked
against the real arrays and caches of small randomly initialized mlx-lm models
(full attention, sliding-window layers, a head_dim that is not hidden/heads, a
quantized model) and against mlx's own peak-memory counter."""

from __future__ import annotations

import gc
import sys

import mlx.core as mx
import mlx.nn as nn
import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx.utils import tree_flatten
from mlx_lm.models import gemma3_text, llama
from mlx_lm.models.cache import make_prompt_cache

import engine.hardware.machine as machine
import engine.memory.facts as memory_facts
from engine.hardware.machine import MIB, allocator_cache_limit, measure_read_bandwidth, usable_memory
from engine.memory.budget import MemoryBudget
from engine.memory.facts import KV_STEP, ModelMemoryFacts, facts_from_model
from engine.memory.plan import (STRATEGY, MemoryPlan, default_reserve, kv_bytes, kv_read_bytes, plan_memory,
                                transient_bytes)

VOCAB = 1000
LLAMA = dict(hidden_size=256, num_hidden_layers=4, intermediate_size=512, num_attention_heads=8,
             num_key_value_heads=2, vocab_size=VOCAB)
WINDOW = 300


def _llama(**extra) -> tuple[nn.Module, dict]:
    config = dict(LLAMA, model_type="llama", rms_norm_eps=1e-5, **extra)
    model = llama.Model(llama.ModelArgs(**config))
    mx.eval(model.parameters())
    return model, config


@pytest.fixture(scope="module")
def full():
    return _llama()


@pytest.fixture(scope="module")
def sliding():
    return _llama(layer_types=["sliding_attention", "full_attention"] * 2, sliding_window=WINDOW)


@pytest.fixture(scope="module")
def gemma():
    # head_dim 64 while hidden/heads is 32; window 128 smaller than a prefill chunk.
    config = dict(model_type="gemma3_text", hidden_size=128, num_hidden_layers=4, intermediate_size=256,
                  num_attention_heads=4, head_dim=64, num_key_value_heads=1, vocab_size=VOCAB,
                  sliding_window=128, sliding_window_pattern=2, query_pre_attn_scalar=64)
    model = gemma3_text.Model(gemma3_text.ModelArgs(**config))
    mx.eval(model.parameters())
    return model, config


def _param_bytes(model: nn.Module) -> int:
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def _prefill(model: nn.Module, tokens: int, chunk: int = 256, tail_split: bool = True) -> list:
    """The engine's pattern: prompt chunks, the last token through a one-token decode."""
    caches = make_prompt_cache(model)
    prompt = tokens - 1 if tail_split else tokens
    pos = 0
    while pos < prompt:
        step = min(chunk, prompt - pos)
        model((mx.arange(pos, pos + step) % VOCAB)[None], cache=caches)
        mx.eval([c.state for c in caches])
        pos += step
    if tail_split:
        out = model(mx.array([[pos % VOCAB]]), cache=caches)[:, -1, :]
        mx.eval(out, [c.state for c in caches])
    return caches


def _cache_bytes(caches: list) -> int:
    return sum(c.nbytes for c in caches)


# --------------------------------------------------------------------------- facts


@pytest.mark.parametrize("name", ["full", "sliding", "gemma"])
def test_weights_bytes_is_the_parameters_nbytes(name, request):
    model, config = request.getfixturevalue(name)
    facts = facts_from_model(model, config)
    assert facts.weights_bytes == _param_bytes(model)
    assert facts.source == "probe"
    assert facts.vocab_size == VOCAB
    assert facts.num_layers == len(make_prompt_cache(model))


def test_quantized_weights_count_scales_and_keep_float_kv():
    model, config = _llama()
    nn.quantize(model, group_size=64, bits=4)
    mx.eval(model.parameters())
    facts = facts_from_model(model, config)
    assert facts.weights_bytes == _param_bytes(model)
    assert facts.weights_bytes < 0.5 * _param_bytes(_llama()[0])
    # KV stays in the activation dtype (float32 here): 2 x kv_heads x head_dim x 4.
    assert facts.kv_bytes_per_token_per_layer == (2 * 2 * 32 * 4,) * 4


def test_probe_reads_layers_windows_and_head_dim(full, sliding, gemma):
    per_token = 2 * 2 * (256 // 8) * 4
    f = facts_from_model(*full)
    assert f.kv_bytes_per_token_per_layer == (per_token,) * 4
    assert f.window_per_layer == (None,) * 4
    assert f.activation_bytes == 4
    assert (f.hidden_size, f.intermediate_size, f.num_attention_heads) == (256, 512, 8)
    s = facts_from_model(*sliding)
    assert s.window_per_layer == (WINDOW, None, WINDOW, None)
    # gemma's head_dim (64) is not hidden/heads (32): the probe reads the cache.
    g = facts_from_model(gemma[0], {k: v for k, v in gemma[1].items() if k != "head_dim"})
    assert g.kv_bytes_per_token_per_layer == (2 * 1 * 64 * 4,) * 4
    assert g.window_per_layer == (128, None, 128, None)


def test_config_fallback_when_no_forward(full, sliding, monkeypatch):
    def refuse(model):
        raise RuntimeError("this model needs other inputs")

    monkeypatch.setattr(memory_facts, "_probe_caches", refuse)
    for model, config in (full, sliding):
        nested = {"model_type": "wrapper", "text_config": config}
        fallback = facts_from_model(model, nested)
        monkeypatch.undo()
        probed = facts_from_model(model, config)
        monkeypatch.setattr(memory_facts, "_probe_caches", refuse)
        assert fallback.source == "config"
        assert fallback.kv_bytes_per_token_per_layer == probed.kv_bytes_per_token_per_layer
        assert fallback.window_per_layer == probed.window_per_layer
        assert fallback.weights_bytes == probed.weights_bytes
        assert fallback.vocab_size == VOCAB


def test_facts_validate_their_shape():
    with pytest.raises(ValueError):
        ModelMemoryFacts(1, (1, 2), (None,), 1, 1, 1, 1, 4)


# ------------------------------------------------------------------------------ kv


@pytest.mark.parametrize("tokens", [1, 2, 255, 256, 257, 300, 513, 1000])
@pytest.mark.parametrize("name", ["full", "sliding", "gemma"])
def test_kv_bytes_equals_the_real_cache(name, tokens, request):
    model, config = request.getfixturevalue(name)
    facts = facts_from_model(model, config)
    caches = _prefill(model, tokens)
    assert sum(c.offset for c in caches) == tokens * len(caches)
    if tokens == 2 and name != "full":
        # a one-token prompt goes through RotatingKVCache's in-place path, which
        # grows in whole steps: below its window the charge is an upper bound
        assert _cache_bytes(caches) <= kv_bytes(facts, tokens)
    else:
        assert _cache_bytes(caches) == kv_bytes(facts, tokens)


def test_kv_bytes_rounds_to_256_steps_and_caps_windows(sliding):
    facts = facts_from_model(*sliding)
    per_token = facts.kv_bytes_per_token_per_layer[0]
    for tokens, full_room in [(1, 256), (256, 256), (257, 512), (1000, 1024)]:
        sliding_room = min(tokens + KV_STEP - 1, WINDOW)
        assert kv_bytes(facts, tokens) == 2 * per_token * (full_room + sliding_room)
    assert kv_bytes(facts, 0) == 0
    assert kv_bytes(facts, 1000, rows=3) == 3 * kv_bytes(facts, 1000)


@pytest.mark.parametrize("tokens", [1, 100, 257, 640])
def test_kv_bytes_bounds_the_cache_for_one_token_decode(tokens, sliding):
    model, config = sliding
    facts = facts_from_model(model, config)
    caches = _prefill(model, tokens, chunk=1, tail_split=False)
    assert _cache_bytes(caches) <= kv_bytes(facts, tokens)


@pytest.mark.parametrize("chunk", [100, 300])
@pytest.mark.parametrize("tokens", [257, 456, 1000])
def test_unaligned_chunks_are_bounded(chunk, tokens, full):
    model, config = full
    facts = facts_from_model(model, config)
    caches = _prefill(model, tokens, chunk=chunk)
    assert _cache_bytes(caches) <= kv_bytes(facts, tokens, chunk=chunk)
    assert kv_bytes(facts, tokens, chunk=chunk) >= kv_bytes(facts, tokens)


def test_kv_read_bytes_counts_attended_tokens(sliding):
    facts = facts_from_model(*sliding)
    per_token = facts.kv_bytes_per_token_per_layer[0]
    assert kv_read_bytes(facts, 100) == 4 * 100 * per_token
    assert kv_read_bytes(facts, 1000) == 2 * per_token * (1000 + WINDOW)


# ----------------------------------------------------------------------- transient


@pytest.mark.parametrize("tokens", [100, 257, 1000, 1300])
@pytest.mark.parametrize("name", ["full", "sliding"])
def test_kv_plus_transient_bounds_the_measured_peak(name, tokens, request):
    model, config = request.getfixturevalue(name)
    facts = facts_from_model(model, config)
    _prefill(model, 300)  # warm up lazily built state (RoPE tables, kernels)
    gc.collect()
    mx.clear_cache()
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    caches = _prefill(model, tokens)
    peak = mx.get_peak_memory() - base
    predicted = kv_bytes(facts, tokens) + transient_bytes(facts, 256, tokens)
    assert _cache_bytes(caches) == kv_bytes(facts, tokens)
    assert peak <= predicted
    assert peak >= 0.6 * predicted  # the accounting is a bound, not a guess


def test_transient_terms(full):
    facts = facts_from_model(*full)
    per_layer = facts.kv_bytes_per_token_per_layer[0]
    chunk, context = 256, 1000
    expected = (chunk * (8 * 256 + 4 * 512) * 4  # activations
                + chunk * context * (8 * 4 + 1)  # float32 scores + causal mask
                + VOCAB * 4  # last position's logits
                + per_layer * 1024)  # one layer's old buffer while the cache grows
    assert transient_bytes(facts, chunk, context) == expected
    # a chunk never exceeds the context; rows multiply logits and the growth copy
    assert transient_bytes(facts, 256, 10) == transient_bytes(facts, 10, 10)
    assert transient_bytes(facts, 256, 1000, rows=2) - transient_bytes(facts, 256, 1000) == VOCAB * 4 + per_layer * 1024
    with pytest.raises(ValueError):
        transient_bytes(facts, 0, 10)


# ---------------------------------------------------------------------------- plan


def _plan(facts, usable, context=1000, **kw):
    return plan_memory(facts, context_tokens=context, usable=usable, bandwidth=1e9, **kw)


def test_plan_sums_and_fits(sliding):
    facts = facts_from_model(*sliding)
    plan = _plan(facts, 2 << 30, context=1000, max_generation_tokens=200, reserve_bytes=64 * MIB)
    assert isinstance(plan, MemoryPlan)
    assert (plan.schema_version, plan.strategy) == (1, STRATEGY)
    assert plan.weights_bytes == facts.weights_bytes
    assert plan.kv_bytes == kv_bytes(facts, 1000)
    assert plan.transient_bytes == transient_bytes(facts, 256, 1000)
    assert plan.reserve_bytes == 64 * MIB
    assert plan.total_bytes == plan.weights_bytes + plan.kv_bytes + plan.transient_bytes + plan.reserve_bytes
    assert plan.fits and plan.total_bytes <= plan.usable_bytes == 2 << 30
    assert plan.max_generation_tokens == 200
    assert dict(plan.streamed_weights) == {}
    assert plan.machine_headroom_bytes is None  # usable given without machine_total
    assert plan.predicted_decode_tps == pytest.approx(1e9 / (facts.weights_bytes + kv_read_bytes(facts, 1000)))
    small = _plan(facts, plan.total_bytes - 1, reserve_bytes=64 * MIB)
    assert not small.fits
    assert _plan(facts, 2 << 30).max_generation_tokens is None


def test_max_safe_context_is_exact_and_monotone(full, sliding):
    for facts in (facts_from_model(*full), facts_from_model(*sliding)):
        previous = -1
        for usable in [facts.weights_bytes + 300 * MIB + k * 7 * MIB for k in range(0, 60, 6)]:
            plan = _plan(facts, usable, reserve_bytes=256 * MIB)
            safe = plan.max_safe_context
            assert safe >= previous
            previous = safe
            at = _plan(facts, usable, context=safe, reserve_bytes=256 * MIB)
            beyond = _plan(facts, usable, context=safe + 1, reserve_bytes=256 * MIB)
            assert at.fits and not beyond.fits
            assert at.max_safe_context == safe
        assert previous > 1000


def test_nothing_fits_below_the_weights(full):
    facts = facts_from_model(*full)
    plan = _plan(facts, facts.weights_bytes // 2, reserve_bytes=0)
    assert not plan.fits and plan.max_safe_context == 0


def test_plan_reads_this_machine(full):
    facts = facts_from_model(*full)
    plan = plan_memory(facts, context_tokens=512)
    usable, limit = usable_memory()
    assert plan.usable_bytes > 0
    assert plan.reserve_bytes == default_reserve(plan.usable_bytes)
    assert plan.machine_headroom_bytes == limit - plan.total_bytes
    assert plan.predicted_decode_tps and plan.predicted_decode_tps > 0
    figures = plan.figures()
    assert all(isinstance(v, str) for v in figures.values())
    assert figures["total_bytes"] == str(plan.total_bytes)
    assert figures["max_safe_context"] == str(plan.max_safe_context)
    assert figures["fits"] == "true"


def test_plan_rejects_bad_input(full):
    facts = facts_from_model(*full)
    with pytest.raises(ValueError):
        _plan(facts, 1 << 30, context=10, max_generation_tokens=11)
    with pytest.raises(ValueError):
        _plan(facts, 1 << 30, context=-1)
    with pytest.raises(ValueError):
        _plan(facts, 1 << 30, prefill_chunk=0)


def test_default_reserve():
    assert default_reserve(1 << 30) == 256 * MIB
    assert default_reserve(100 << 30) == (100 << 30) // 20


# -------------------------------------------------------------------------- budget


def test_budget_agrees_with_the_plan(sliding):
    facts = facts_from_model(*sliding)
    usable = facts.weights_bytes + 256 * MIB + 40 * MIB
    budget = MemoryBudget(facts, usable=usable, reserve_bytes=256 * MIB)
    safe = _plan(facts, usable, reserve_bytes=256 * MIB).max_safe_context
    assert budget.max_context == safe
    for tokens in (1, safe // 2, safe, safe + 1, 10 * safe):
        assert budget.would_ever_fit(tokens) == _plan(facts, usable, context=tokens, reserve_bytes=256 * MIB).fits
    assert not budget.try_reserve("too-long", safe + 1) and budget.reserved == 0
    assert budget.try_reserve("fits", safe) and budget.reserved == 1
    budget.release("fits")
    assert budget.reserved == 0 and budget.committed_bytes == 0


def test_budget_accounting(full):
    facts = facts_from_model(*full)
    usable = facts.weights_bytes + 256 * MIB + 24 * MIB
    budget = MemoryBudget(facts, usable=usable, reserve_bytes=256 * MIB)
    assert budget.budget_bytes == 24 * MIB
    assert budget.committed_bytes == 0 and budget.available_bytes == 24 * MIB
    assert budget.try_reserve("a", 1000)
    assert budget.committed_bytes == kv_bytes(facts, 1000) + transient_bytes(facts, 256, 1000)
    assert budget.try_reserve("b", 500)
    # padded batch: both rows are charged the longest row's cache
    assert budget.committed_bytes == budget.cost([1000, 500]) == (
        kv_bytes(facts, 1000, rows=2) + transient_bytes(facts, 256, 1000, rows=2))
    held = ["a", "b"]
    while budget.try_reserve(f"r{len(held)}", 1000):
        held.append(f"r{len(held)}")
    assert budget.would_ever_fit(1000)  # short for now, not forever
    assert budget.available_bytes < budget.cost([1000] * (len(held) + 1)) - budget.cost([1000] * len(held))
    with pytest.raises(ValueError):
        budget.try_reserve("a", 1)  # one reservation per key
    budget.release(held.pop())
    assert budget.try_reserve("again", 1000)
    budget.release("again")
    budget.release("again")  # idempotent
    for key in held:
        budget.release(key)
    assert budget.reserved == 0 and budget.committed_bytes == 0
    unpadded = MemoryBudget(facts, usable=usable, reserve_bytes=256 * MIB, padded_batch=False)
    assert unpadded.cost([1000, 500]) == (kv_bytes(facts, 1000) + kv_bytes(facts, 500)
                                          + transient_bytes(facts, 256, 1000, rows=2))
    assert unpadded.cost([1000, 500]) < budget.cost([1000, 500])


def test_budget_with_nothing_to_spend(full):
    facts = facts_from_model(*full)
    budget = MemoryBudget(facts, usable=facts.weights_bytes, reserve_bytes=256 * MIB)
    assert not budget.would_ever_fit(1)
    assert not budget.try_reserve("x", 1)
    assert budget.max_context == 0


@pytest.fixture(scope="module")
def full_facts(full):
    return facts_from_model(*full)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.integers(1, 3000)), max_size=60))
def test_budget_never_overcommits(full_facts, ops):
    """Random reserves and releases: what is committed is exactly the cost of the
    keys held, and never more than the budget."""
    facts = full_facts
    budget = MemoryBudget(facts, usable=facts.weights_bytes + 256 * MIB + 16 * MIB, reserve_bytes=256 * MIB)
    held: dict[str, int] = {}
    for reserve, key, tokens in ops:
        name = f"k{key}"
        if reserve and name not in held:
            fits = budget.cost([*held.values(), tokens]) <= budget.budget_bytes
            assert budget.try_reserve(name, tokens) is fits
            if fits:
                held[name] = tokens
        elif not reserve:
            budget.release(name)
            held.pop(name, None)
        assert budget.reserved == len(held)
        assert budget.committed_bytes == budget.cost(held.values()) <= budget.budget_bytes


# ------------------------------------------------------------------------- machine


def test_usable_memory_is_bounded_by_ram():
    usable, limit = usable_memory()
    total = psutil.virtual_memory().total
    assert 0 < usable <= limit <= total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cgroups are Linux")
def test_cgroup_limits_are_read(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/box/job\n0::/box/job\n")
    v2 = tmp_path / "v2"
    (v2 / "box" / "job").mkdir(parents=True)
    (v2 / "box" / "job" / "memory.max").write_text("max\n")
    (v2 / "box" / "memory.max").write_text(f"{8 << 30}\n")
    (v2 / "box" / "memory.current").write_text(f"{3 << 30}\n")
    (v2 / "box" / "memory.stat").write_text(f"anon 1\ninactive_file {1 << 30}\n")
    assert machine._cgroup_memory(str(proc), (str(v2), None)) == (8 << 30, 2 << 30)
    v1 = tmp_path / "v1"
    (v1 / "box" / "job").mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # unlimited
    (v1 / "box" / "job" / "memory.limit_in_bytes").write_text(f"{4 << 30}\n")
    (v1 / "box" / "job" / "memory.usage_in_bytes").write_text(f"{1 << 30}\n")
    assert machine._cgroup_memory(str(proc), (None, str(v1))) == (4 << 30, 1 << 30)
    assert machine._cgroup_memory(str(proc), (str(v2), str(v1)))[0] == 4 << 30
    assert machine._cgroup_memory(str(tmp_path / "missing"), (str(v2), None)) == (None, None)


def test_read_bandwidth_is_measured_once():
    first = measure_read_bandwidth(32 * MIB)
    assert first > 1e8  # any machine reads faster than 100 MB/s
    assert measure_read_bandwidth(32 * MIB) == first  # cached


def test_allocator_limit_is_read_without_changing_it():
    before = allocator_cache_limit()
    assert before is not None and before >= 0
    assert allocator_cache_limit() == before
    previous = mx.set_cache_limit(12345 * MIB)  # a limit we set is the one read back
    try:
        assert previous == before
        assert allocator_cache_limit() == 12345 * MIB
    finally:
        mx.set_cache_limit(previous)
    assert allocator_cache_limit() == before


def test_the_kernels_attention_holds_no_score_matrix_and_the_plan_counts_none(fixture_models):
    """With the CPU kernels a prefill chunk's attention runs in blocks of keys: the
    transient workspace counts the mask, not float32 scores for every head."""
    from engine import kernels
    from engine.loading.model import load_generation_model
    from engine.memory.facts import blockwise_attention
    from engine.memory.plan import transient_bytes

    plain = load_generation_model(fixture_models["llama"], use_kernels=False)
    assert not blockwise_attention(plain)
    if not kernels.enabled():
        pytest.skip("the CPU kernels are off or not built")
    fast = load_generation_model(fixture_models["llama"])
    assert blockwise_attention(fast)
    facts = facts_from_model(fast.model, fast.config, blockwise_attention=True)
    stored = facts_from_model(plain.model, plain.config)
    heads = facts.num_attention_heads
    assert (transient_bytes(stored, 256, 4096) - transient_bytes(facts, 256, 4096)) == 256 * 4096 * heads * 4
