"""The scheduler driven directly (no thread, no server): admission order, capacity,
the memory budget, joining and leaving the batch, cancel in every state."""

from __future__ import annotations

import json
import time

import mlx_lm
import pytest

from engine.events import Delta, Finished, FinishReason, Started
from engine.generation.config import SchedulerConfig
from engine.generation.core.sampling.sampler import SamplingState
from engine.generation.core.scheduling.scheduler import Scheduler
from engine.generation.core.sequence.delivery import Delivery, IncrementalDetokenizer
from engine.generation.core.sequence.state import SequenceState, Status
from engine.generation.core.sequence.stopping import StopStringMatcher, TokenStopRule
from engine.memory.budget import MemoryBudget
from engine.memory.facts import facts_from_model
from engine.requests import SamplingOptions
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS


@pytest.fixture(scope="module")
def llama(fixture_models):
    model, tokenizer = mlx_lm.load(str(fixture_models["llama"]))
    config = json.loads((fixture_models["llama"] / "config.json").read_text())
    return model, tokenizer, facts_from_model(model, config)


class Log:
    """Every event of every sequence, in the order the engine emitted them."""

    def __init__(self):
        self.events: list[tuple[str, object]] = []

    def sink(self, rid):
        return lambda event: self.events.append((rid, event))

    def kinds(self, kind) -> list[str]:
        return [rid for rid, e in self.events if isinstance(e, kind)]

    def tokens(self, rid) -> list[int]:
        return [t for r, e in self.events if r == rid and isinstance(e, Delta) for t in e.token_ids]

    def finish(self, rid) -> Finished:
        return next(e for r, e in self.events if r == rid and isinstance(e, Finished))


def sequence(tokenizer, log, rid, prompt, max_tokens) -> SequenceState:
    ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
    delivery = Delivery(rid, "llama", log.sink(rid), IncrementalDetokenizer(tokenizer.decode, ids),
                        StopStringMatcher(()), time.perf_counter())
    rule = TokenStopRule(max_tokens, 0, frozenset(tokenizer.eos_token_ids), frozenset(), False)
    return SequenceState(rid, ids, len(ids), len(ids) + max_tokens, rule, SamplingState(SamplingOptions(), ids), delivery)


def run(scheduler, until=lambda: False, limit=2000) -> int:
    ticks = 0
    while not scheduler.idle and not until() and ticks < limit:
        scheduler.tick()
        ticks += 1
    return ticks


def settled(scheduler):
    s = scheduler.stats()
    assert (s.waiting, s.running, s.reserved, s.reserved_bytes, s.rows, s.kv_bytes) == (0, 0, 0, 0, 0, 0), s


CONFIG = SchedulerConfig(max_active=3, prefill_chunk=8, tick_tokens=24, min_prefill_tokens=4,
                         prefix_cache_bytes=0)


def test_output_equals_mlx_lm_and_order_is_fifo(llama, oracle):
    model, tokenizer, _ = llama
    log = Log()
    scheduler = Scheduler(model, CONFIG, lambda i: tokenizer.decode([i]))
    names = list(ORACLE_PROMPTS)
    for name in names:
        scheduler.enqueue(sequence(tokenizer, log, name, ORACLE_PROMPTS[name], ORACLE_TOKENS[name]))
    peak = 0
    while not scheduler.idle:
        scheduler.tick()
        peak = max(peak, scheduler.stats().running)
    assert peak == CONFIG.max_active
    assert log.kinds(Started) == names  # started in arrival order
    for name in names:
        assert log.tokens(name) == oracle["llama"][name], name
        assert log.finish(name).reason is FinishReason.LENGTH
    settled(scheduler)
    assert scheduler.generated_tokens == sum(ORACLE_TOKENS.values())


def test_memory_budget_waits_without_overtaking(llama):
    model, tokenizer, facts = llama
    probe = MemoryBudget(facts, usable=1 << 40, reserve_bytes=0, prefill_chunk=8)
    usable = facts.weights_bytes + (probe.cost([300]) + probe.cost([300, 300])) // 2  # one 300, not two
    budget = MemoryBudget(facts, usable=usable, reserve_bytes=0, prefill_chunk=8)
    log = Log()
    scheduler = Scheduler(model, CONFIG, lambda i: tokenizer.decode([i]), budget=budget)
    prompt = list(range(10, 20))
    scheduler.enqueue(sequence(tokenizer, log, "a", prompt, 290))
    scheduler.enqueue(sequence(tokenizer, log, "b", prompt, 290))
    scheduler.enqueue(sequence(tokenizer, log, "small", prompt, 2))  # would fit beside "a", but may not overtake
    run(scheduler, until=lambda: len(log.tokens("a")) >= 5)
    stats = scheduler.stats()
    assert log.kinds(Started) == ["a"] and (stats.running, stats.waiting, stats.reserved) == (1, 2, 1)
    run(scheduler)
    assert log.kinds(Started) == ["a", "b", "small"]
    assert [log.finish(r).reason for r in ("a", "b", "small")] == [FinishReason.LENGTH] * 3
    settled(scheduler)


def test_cancel_in_every_state_frees_everything(llama):
    model, tokenizer, _ = llama
    log = Log()
    config = SchedulerConfig(max_active=2, prefill_chunk=4, tick_tokens=8, min_prefill_tokens=4, prefix_cache_bytes=0)
    scheduler = Scheduler(model, config, lambda i: tokenizer.decode([i]))
    long_prompt = list(range(10, 90))  # 20 chunks of prefill
    scheduler.enqueue(sequence(tokenizer, log, "decoding", [5, 6, 7], 500))
    scheduler.enqueue(sequence(tokenizer, log, "prefilling", long_prompt, 5))
    scheduler.enqueue(sequence(tokenizer, log, "waiting", [5, 6, 7], 5))
    run(scheduler, until=lambda: len(log.tokens("decoding")) >= 3)
    states = {s.key: s.status for s in (*scheduler._prefilling, *scheduler._decoding)}
    assert states == {"decoding": Status.DECODING, "prefilling": Status.PREFILLING}
    assert scheduler.stats().waiting == 1
    for rid in ("waiting", "prefilling", "decoding"):
        assert scheduler.cancel(rid)
    assert not scheduler.cancel("no-such-request")
    scheduler.tick()  # the decoding row leaves at the next prune
    for rid in ("waiting", "prefilling", "decoding"):
        assert log.finish(rid).reason is FinishReason.CANCELLED
    assert "waiting" not in log.kinds(Started)
    assert scheduler.idle
    settled(scheduler)


def test_rows_join_and_leave_while_others_decode(llama, oracle):
    model, tokenizer, _ = llama
    log = Log()
    scheduler = Scheduler(model, CONFIG, lambda i: tokenizer.decode([i]))
    names = list(ORACLE_PROMPTS)
    pending = list(names)
    sizes = []
    while pending or not scheduler.idle:
        if pending and len(log.events) % 3 == 0:  # arrivals spread over the run
            name = pending.pop(0)
            scheduler.enqueue(sequence(tokenizer, log, name, ORACLE_PROMPTS[name], ORACLE_TOKENS[name]))
        scheduler.tick()
        sizes.append(scheduler._batch.size)
    assert len(set(sizes)) > 2  # the batch grew and shrank
    for name in names:
        assert log.tokens(name) == oracle["llama"][name], name
    settled(scheduler)


def test_prefix_reuse_gives_the_same_output(llama):
    model, tokenizer, _ = llama
    log = Log()
    config = SchedulerConfig(max_active=2, prefill_chunk=8, tick_tokens=24, min_prefill_tokens=4)
    scheduler = Scheduler(model, config, lambda i: tokenizer.decode([i]))
    prompt = ORACLE_PROMPTS["long"]
    for rid in ("first", "second"):
        scheduler.enqueue(sequence(tokenizer, log, rid, prompt, 10))
        run(scheduler)
    started = dict((rid, e) for rid, e in log.events if isinstance(e, Started))
    assert started["first"].cached_tokens == 0 and started["second"].cached_tokens > 0
    assert log.tokens("first") == log.tokens("second")
    stats = scheduler.stats()
    assert stats.prefix_hits == 1 and stats.prefix_entries > 0 and stats.prefix_bytes > 0
    settled(scheduler)


def test_a_cancel_waiting_during_a_prefill_chunk_stops_it_between_layers(llama, oracle):
    model, tokenizer, _ = llama
    log = Log()
    waiting: set[str] = set()  # stands in for the worker's inbox
    config = SchedulerConfig(max_active=2, prefill_chunk=64, tick_tokens=64, min_prefill_tokens=4,
                             prefix_cache_bytes=0, prefill_batch=1)
    scheduler = Scheduler(model, config, lambda i: tokenizer.decode([i]), interrupt=lambda rid: rid in waiting)
    checkpoints = scheduler._prefiller.checkpoints
    scheduler.enqueue(sequence(tokenizer, log, "neighbour", [5, 6, 7], 40))
    run(scheduler, until=lambda: len(log.tokens("neighbour")) >= 2)
    before = checkpoints.layers_run
    scheduler.enqueue(sequence(tokenizer, log, "victim", list(range(10, 200)), 5))
    waiting.add("victim")
    scheduler.tick()
    assert log.finish("victim").reason is FinishReason.CANCELLED
    assert checkpoints.layers_run == before + 1  # stopped after its first layer, not at the chunk's end
    assert log.tokens("victim") == [] and scheduler.stats().running == 1
    scheduler.enqueue(sequence(tokenizer, log, "short", ORACLE_PROMPTS["medium"], ORACLE_TOKENS["medium"]))
    run(scheduler)
    assert log.tokens("short") == oracle["llama"]["medium"]  # later prefills run normally
    assert log.finish("neighbour").reason is FinishReason.LENGTH and len(log.tokens("neighbour")) == 40
    settled(scheduler)


def test_a_burst_sharing_a_short_preamble_keeps_its_batched_prefill(llama):
    """Short prompts take a cached prefix only when it covers half of them: a burst
    sharing a short preamble is prefilled in one forward instead of one by one,
    while a prompt seen before still takes its hit."""
    model, tokenizer, _ = llama
    config = SchedulerConfig(max_active=8, prefill_chunk=64, tick_tokens=512, prefill_batch=8)
    preamble = list(range(10, 16))  # 6 tokens: under half of each 20-token prompt below
    first = preamble + list(range(30, 44))
    burst = {f"b{i}": preamble + list(range(50 + 14 * i, 64 + 14 * i)) for i in range(4)}

    def alone(prompt) -> list[int]:
        log = Log()
        scheduler = Scheduler(model, SchedulerConfig(prefix_cache_bytes=0), lambda i: tokenizer.decode([i]))
        scheduler.enqueue(sequence(tokenizer, log, "x", prompt, 4))
        run(scheduler)
        return log.tokens("x")

    log = Log()
    scheduler = Scheduler(model, config, lambda i: tokenizer.decode([i]))
    groups: list[int] = []
    together = scheduler._prefiller._prefill_group
    scheduler._prefiller._prefill_group = lambda group: groups.append(len(group)) or together(group)
    scheduler.enqueue(sequence(tokenizer, log, "first", first, 4))
    run(scheduler)  # stored in the prefix cache: prompt and output
    for rid, prompt in burst.items():
        scheduler.enqueue(sequence(tokenizer, log, rid, prompt, 4))
    scheduler.enqueue(sequence(tokenizer, log, "again", first, 4))
    run(scheduler)
    assert groups == [4]  # the burst in one forward; "again" alone, from its hit
    assert {rid: log.finish(rid).usage.cached_tokens for rid in burst} == {rid: 0 for rid in burst}
    assert log.finish("again").usage.cached_tokens == len(first) - 1
    for rid, prompt in burst.items():
        assert log.tokens(rid) == alone(prompt), rid
    assert log.tokens("again") == log.tokens("first")
    settled(scheduler)
