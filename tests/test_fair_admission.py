"""Fair admission through the scheduler on the fixture model: priority order, aging,
weighted fair queuing between tenants, headroom for a tenant below its share, the
memory pin, and outputs equal to running alone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.events import FinishReason, Started
from engine.generation.config import SchedulerConfig
from engine.generation.core.scheduling.scheduler import Scheduler
from engine.memory.budget import MemoryBudget
from engine.tenancy import Tenant
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS
from tests.test_engine_scheduler import Log, llama, run, sequence, settled  # noqa: F401 - llama: fixture

BASE = SchedulerConfig(max_active=1, prefill_chunk=8, tick_tokens=24, min_prefill_tokens=4,
                       prefix_cache_bytes=0, priority_aging_s=0, fair_headroom=0)
A, B = Tenant("A"), Tenant("B")


def scheduler_for(llama, config=BASE, **kw) -> Scheduler:
    model, tokenizer, _ = llama
    return Scheduler(model, config, lambda i: tokenizer.decode([i]), **kw)


def submit(scheduler, llama, log, rid, tenant=A, priority=0, prompt=(5, 6, 7), max_tokens=3):
    seq = sequence(llama[1], log, rid, list(prompt), max_tokens)
    seq.tenant, seq.priority = tenant, priority
    scheduler.enqueue(seq)
    return seq


def test_one_named_tenant_at_one_priority_starts_in_arrival_order(llama):
    log = Log()
    scheduler = scheduler_for(llama, replace(BASE, max_active=2, priority_aging_s=5.0, fair_headroom=4))
    names = [f"r{i}" for i in range(8)]
    for i, rid in enumerate(names):
        submit(scheduler, llama, log, rid, Tenant("solo", weight=3.0), max_tokens=2 + i % 3)
    run(scheduler)
    assert log.kinds(Started) == names
    settled(scheduler)


def test_higher_priority_starts_first_then_arrival_order(llama):
    log = Log()
    scheduler = scheduler_for(llama)
    submit(scheduler, llama, log, "running", max_tokens=6)
    scheduler.tick()
    for rid, priority in (("low", -3), ("mid", 5), ("high", 10), ("mid2", 5), ("zero", 0)):
        submit(scheduler, llama, log, rid, priority=priority)
    run(scheduler)
    assert log.kinds(Started) == ["running", "high", "mid", "mid2", "zero", "low"]
    settled(scheduler)


@pytest.mark.parametrize("low_tenant", [A, B], ids=["same-tenant", "other-tenant"])
def test_aging_starts_a_low_priority_request_while_higher_ones_keep_arriving(llama, low_tenant):
    def starts_low(aging_s: float) -> tuple[bool, int]:
        log = Log()
        scheduler = scheduler_for(llama, replace(BASE, priority_aging_s=aging_s))
        now = [0.0]
        scheduler.admission.queue.clock = lambda: now[0]
        submit(scheduler, llama, log, "high-0", priority=5)
        scheduler.tick()
        submit(scheduler, llama, log, "low", low_tenant, priority=0)
        for i in range(1, 40):  # a higher request always waits beside the low one
            submit(scheduler, llama, log, f"high-{i}", priority=5)
            run(scheduler, until=lambda: "low" in log.kinds(Started) or len(log.kinds(Started)) > i)
            now[0] += 1.0
        started = log.kinds(Started)
        for seq in list(scheduler.admission.queue):
            scheduler.cancel(seq.key)
        run(scheduler)
        settled(scheduler)
        return "low" in started, started.index("low") if "low" in started else -1

    assert starts_low(0) == (False, -1)  # without aging it starves
    started, position = starts_low(1.0)
    assert started and 3 <= position <= 8  # after the highs of its first seconds, then in turn


def test_weights_share_starts_by_tokens_while_both_are_backlogged(llama, oracle):
    log = Log()
    scheduler = scheduler_for(llama, replace(BASE, max_active=2))
    light, heavy = Tenant("light", weight=1.0), Tenant("heavy", weight=3.0)
    for i in range(8):
        submit(scheduler, llama, log, f"light-{i}", light, max_tokens=4)
    for i in range(24):
        submit(scheduler, llama, log, f"heavy-{i}", heavy, max_tokens=4)
    run(scheduler, until=lambda: len(log.kinds(Started)) >= 16)
    first = log.kinds(Started)[:16]
    counts = {name: sum(rid.startswith(name) for rid in first) for name in ("light", "heavy")}
    assert counts == {"light": 4, "heavy": 12}  # equal costs: starts in the ratio of the weights
    run(scheduler)
    settled(scheduler)


@pytest.mark.parametrize("headroom", [0, 1])
def test_a_flooding_tenant_cannot_hold_another_tenants_request_behind_its_queue(llama, headroom):
    log = Log()
    scheduler = scheduler_for(llama, replace(BASE, max_active=2, fair_headroom=headroom))
    for i in range(10):
        submit(scheduler, llama, log, f"flood-{i}", A, max_tokens=20)
    run(scheduler, until=lambda: len(log.kinds(Started)) >= 2)
    assert scheduler.stats().running == 2 and scheduler.stats().waiting == 8
    submit(scheduler, llama, log, "single", B, max_tokens=3)
    peak = {"all": 0, "A": 0}
    while "single" not in log.kinds(Started):
        scheduler.tick()
        peak["all"] = max(peak["all"], scheduler.stats().running)
        peak["A"] = max(peak["A"], scheduler.admission.tenants().get("A", (0, 0))[0])
        if headroom:
            assert "single" in log.kinds(Started)  # the very next admission, on headroom
    assert log.kinds(Started)[2] == "single"  # before the rest of the flood
    assert peak["all"] <= 2 + headroom and peak["A"] <= 2  # the flood never takes headroom
    run(scheduler)
    assert all(log.finish(f"flood-{i}").reason is FinishReason.LENGTH for i in range(10))
    settled(scheduler)


def test_the_candidate_waiting_for_memory_is_not_overtaken_and_may_leave(llama):
    _, _, facts = llama
    probe = MemoryBudget(facts, usable=1 << 40, reserve_bytes=0, prefill_chunk=8)
    usable = facts.weights_bytes + (probe.cost([300]) + probe.cost([300, 300])) // 2  # one 300, not two

    def order(cancel_big: bool) -> list[str]:
        log = Log()
        budget = MemoryBudget(facts, usable=usable, reserve_bytes=0, prefill_chunk=8)
        scheduler = scheduler_for(llama, replace(BASE, max_active=3), budget=budget)
        prompt = list(range(10, 20))
        submit(scheduler, llama, log, "a", A, prompt=prompt, max_tokens=290)
        submit(scheduler, llama, log, "big", B, prompt=prompt, max_tokens=290)
        run(scheduler, until=lambda: len(log.tokens("a")) >= 3)
        assert log.kinds(Started) == ["a"]  # "big" is chosen and waits for memory
        submit(scheduler, llama, log, "urgent", Tenant("C"), priority=50, prompt=prompt, max_tokens=2)
        run(scheduler, until=lambda: len(log.tokens("a")) >= 8)
        assert log.kinds(Started) == ["a"]  # fits beside "a", yet may not overtake
        if cancel_big:
            assert scheduler.cancel("big")
            scheduler.tick()
        run(scheduler)
        settled(scheduler)
        return log.kinds(Started)

    assert order(cancel_big=False) == ["a", "big", "urgent"]
    assert order(cancel_big=True) == ["a", "urgent"]  # the cancelled one took nothing with it


def test_tenants_priorities_and_headroom_leave_outputs_unchanged(llama, oracle):
    log = Log()
    scheduler = scheduler_for(llama, replace(BASE, max_active=2, fair_headroom=2, priority_aging_s=0.5))
    tenants = [Tenant("A"), Tenant("B", weight=2.0), Tenant("C", weight=0.5)]
    for i, name in enumerate(ORACLE_PROMPTS):
        ids = llama[1].encode(ORACLE_PROMPTS[name])
        submit(scheduler, llama, log, name, tenants[i % 3], priority=i % 4, prompt=ids,
               max_tokens=ORACLE_TOKENS[name])
    run(scheduler)
    assert sorted(log.kinds(Started)) == sorted(ORACLE_PROMPTS)
    for name in ORACLE_PROMPTS:
        assert log.tokens(name) == oracle["llama"][name], name
    settled(scheduler)
