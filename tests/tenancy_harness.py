"""A generation engine for the tenancy tests and helpers to drive it.

One engine of the llama fixture with one running slot and four queued (so a long
request holds the engine while others wait), one compile thread and a short
compile timeout; requests ignore EOS, so their lengths are known.
"""

from __future__ import annotations

import asyncio

import pytest_asyncio

from engine.events import Started
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.generation.grammar.formats import GrammarLimits
from engine.requests import GenerationRequest, StopOptions, TextPrompt
from engine.tenancy import Tenant
from engine.validation import Limits

NAME = "tenanted"
A, B = Tenant("a"), Tenant("b")
COMPILE_TIMEOUT_S = 0.5
LONG = 3000  # tokens: far more than any test waits for


@pytest_asyncio.fixture(scope="module")
async def engine(fixture_models):
    config = GenerationConfig(
        limits=Limits(max_prompt_tokens=256),
        grammar=GrammarLimits(compile_threads=1, compile_timeout_s=COMPILE_TIMEOUT_S),
        scheduler=SchedulerConfig(max_active=1, max_queued=4, prefill_chunk=8, tick_tokens=24,
                                  min_prefill_tokens=4, fair_headroom=0))  # one slot, strictly
    engine = GenerationEngine(str(fixture_models["llama"]), name=NAME, config=config)
    await engine.start()
    yield engine
    await engine.close()


def ask(prompt="Hello there", *, tenant=A, max_tokens=4, request_id="", **kw) -> GenerationRequest:
    prompt = TextPrompt(prompt) if isinstance(prompt, str) else prompt
    return GenerationRequest(prompt=prompt, request_id=request_id, tenant=tenant,
                             stopping=StopOptions(max_tokens=max_tokens, ignore_eos=True), **kw)


async def run(engine, request) -> list:
    return [event async for event in engine.generate(request)]


class Held:
    """A request consumed in the background, first event awaited."""

    def __init__(self, engine, request):
        self.events: list = []
        self.first = asyncio.Event()
        self.task = asyncio.ensure_future(self._consume(engine, request))

    async def _consume(self, engine, request):
        async for event in engine.generate(request):
            self.events.append(event)
            self.first.set()
        return self.events

    async def started(self):
        await asyncio.wait_for(self.first.wait(), 30)
        assert isinstance(self.events[0], Started)


async def queued_behind(engine, count: int):
    """Waits until ``count`` requests wait in the engine's queue."""
    for _ in range(600):
        if engine.queued >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the requests never queued")


def tenant_of(engine, name):
    return {t.tenant: t for t in engine.tenant_stats()}[name]
