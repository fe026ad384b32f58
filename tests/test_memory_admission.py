"""Admission by memory: never-fitting requests are refused at once with the plan's
figures; requests that only do not fit beside running ones wait their turn."""

from __future__ import annotations

import asyncio
import json

import grpc
import mlx_lm
import pytest

from engine.errors import DoesNotFit
from engine.events import Finished, Started
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.memory.budget import MemoryBudget
from engine.memory.facts import facts_from_model
from engine.requests import GenerationRequest, StopOptions, TokenPrompt
from service.status import to_status

CHUNK = 8


@pytest.fixture(scope="module")
def tight_limit(fixture_models) -> int:
    """Usable bytes that fit one 600-token request beside the weights, not two."""
    model, _ = mlx_lm.load(str(fixture_models["llama"]))
    config = json.loads((fixture_models["llama"] / "config.json").read_text())
    facts = facts_from_model(model, config)
    probe = MemoryBudget(facts, usable=1 << 40, reserve_bytes=0, prefill_chunk=CHUNK)
    return facts.weights_bytes + (probe.cost([600]) + probe.cost([600, 600])) // 2


@pytest.fixture
async def tight_engine(fixture_models, tight_limit):
    config = GenerationConfig(memory_limit_bytes=tight_limit, memory_reserve_bytes=0,
                              scheduler=SchedulerConfig(prefill_chunk=CHUNK, prefix_cache_bytes=0))
    engine = GenerationEngine(str(fixture_models["llama"]), name="tight", config=config)
    await engine.start()
    yield engine
    await engine.close()


def ask(max_tokens: int | None) -> GenerationRequest:
    return GenerationRequest(prompt=TokenPrompt(tuple(range(10, 20))), stopping=StopOptions(max_tokens=max_tokens))


async def until_queued_behind(engine, log):
    """The engine's stats once a second request is in flight, polled rather than slept on:
    the first request may finish its 580 tokens in well under a second."""
    for _ in range(2000):
        stats = await engine.stats()
        if stats.in_flight == 2 and stats.waiting == 1:
            return stats
        assert ("first", "Finished") not in log, "the first finished before the second was queued"
        await asyncio.sleep(0.005)
    raise AssertionError(f"the second request never queued: {stats}")


async def collect(engine, request, log, name):
    async for event in engine.generate(request):
        if isinstance(event, (Started, Finished)):
            log.append((name, type(event).__name__))


async def test_never_fitting_request_is_refused_at_once_with_figures(tight_engine):
    with pytest.raises(DoesNotFit) as err:
        async for _ in tight_engine.generate(ask(3000)):
            pass
    figures = err.value.metadata
    assert figures["context_tokens"] == "3010"
    assert 600 <= int(figures["max_safe_context"]) < 1200
    status = to_status(err.value)
    assert status.code == grpc.StatusCode.OUT_OF_RANGE


async def test_unset_max_tokens_is_capped_to_what_memory_allows(tight_engine):
    events = [e async for e in tight_engine.generate(ask(None))]
    finished = events[-1]
    assert isinstance(finished, Finished)
    used = finished.usage.prompt_tokens + finished.usage.completion_tokens
    assert 600 <= used <= tight_engine.served.budget.max_context


async def test_short_for_now_waits_instead_of_failing(tight_engine):
    log: list = []
    first = asyncio.create_task(collect(tight_engine, ask(580), log, "first"))
    while not log:
        await asyncio.sleep(0.005)
    second = asyncio.create_task(collect(tight_engine, ask(580), log, "second"))
    stats = await until_queued_behind(tight_engine, log)
    # the second keeps its place in the queue; only the first holds memory and a row
    assert (stats.in_flight, stats.waiting, stats.running, stats.reserved, stats.rows) == (2, 1, 1, 1, 1)
    await asyncio.gather(first, second)
    assert log == [("first", "Started"), ("first", "Finished"), ("second", "Started"), ("second", "Finished")]
    stats = await tight_engine.stats()
    assert (stats.in_flight, stats.waiting, stats.reserved, stats.rows, stats.tracked) == (0, 0, 0, 0, 0)


async def test_cancelling_a_request_waiting_for_memory_releases_its_slot(tight_engine):
    log: list = []
    first = asyncio.create_task(collect(tight_engine, ask(580), log, "first"))
    while not log:
        await asyncio.sleep(0.005)
    waiting = asyncio.create_task(collect(tight_engine, ask(580), log, "waiting"))
    await until_queued_behind(tight_engine, log)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await first
    stats = await tight_engine.stats()
    assert (stats.in_flight, stats.waiting, stats.reserved, stats.rows) == (0, 0, 0, 0)
    assert ("waiting", "Started") not in log
