"""One row's fault ends that row alone: a sequence whose delivery raises mid-stream,
or whose prompt chunk raises (in a shared short-prompt forward, then alone), ends
with INTERNAL while the other rows of the same batch finish with their solo tokens."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

import grpc
import pytest

from tests.helpers import generate, request
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS
from tests.probe import probe
from tests.test_cancellation import settled


@contextlib.asynccontextmanager
async def held(engine):
    """Keeps the engine thread busy (between ticks) until the block ends, so that what
    is submitted meanwhile is admitted together, in submission order."""
    entered, release = threading.Event(), threading.Event()

    def hold(_scheduler):
        entered.set()
        release.wait(30)

    future = probe(engine, hold)
    await asyncio.to_thread(entered.wait, 30)
    try:
        yield
    finally:
        release.set()
        await asyncio.wrap_future(future)


async def submit_in_order(stub, engine, requests) -> list[asyncio.Task]:
    """Starts one Generate per request, each submitted before the next is sent."""
    tasks = []
    for req in requests:
        before = engine.queued + engine.active  # submitted, as the event loop heard
        tasks.append(asyncio.create_task(generate(stub, req)))
        for _ in range(1000):
            if engine.queued + engine.active > before:
                break
            await asyncio.sleep(0.01)
    return tasks


def patch_started(engine, target: str, patch):
    """Engine-thread call: ``patch(seq)`` runs on ``target``'s sequence once it started."""
    def install(scheduler):
        original = scheduler._start

        def start(seq):
            original(seq)
            if seq.delivery.request_id == target:  # request_id is the engine-side key
                patch(seq)
                del scheduler._start  # the class's own again
        scheduler._start = start
    return asyncio.wrap_future(probe(engine, install))


async def test_a_row_whose_delivery_fails_ends_alone(stub, server, oracle):
    engine = server["models"].generator("llama")
    target = "list"

    def fail_third_token(seq):
        text, calls = seq.delivery.text, []

        def faulty(token, stops_active):
            calls.append(token)
            if len(calls) == 3:
                raise RuntimeError("injected delivery fault")
            return text(token, stops_active)
        seq.delivery.text = faulty

    await patch_started(engine, f"row-{target}", fail_third_token)
    reqs = [request(ORACLE_PROMPTS[name], max_tokens=ORACLE_TOKENS[name], request_id=f"row-{name}")
            for name in ORACLE_PROMPTS]
    async with held(engine):
        tasks = await submit_in_order(stub, engine, reqs)
    results = dict(zip(ORACLE_PROMPTS, await asyncio.gather(*tasks, return_exceptions=True)))
    failed = results.pop(target)
    assert isinstance(failed, grpc.aio.AioRpcError) and failed.code() == grpc.StatusCode.INTERNAL
    for name, out in results.items():
        assert not isinstance(out, BaseException), (name, out)
        assert out.token_ids == oracle["llama"][name], name
    await settled(server, "llama")


class _FaultyTokens(list):
    """A prompt whose slices (what a prefill forward reads) raise."""

    def __getitem__(self, index):
        if isinstance(index, slice):
            raise RuntimeError("injected prefill fault")
        return super().__getitem__(index)


async def test_a_row_whose_prefill_fails_ends_alone(stub, server, caplog):
    engine = server["models"].generator("llama")
    # fresh prompts (nothing cached) that fit one chunk: they share one forward
    prompts = ["Gulls wheel", "Tides turn", "Nets dry", "Oars creak", "Boats rock", "Ropes fray", "Sails luff",
               "Keels groan"]
    await patch_started(engine, "prefill-0", lambda seq: setattr(seq, "tokens", _FaultyTokens(seq.tokens)))
    reqs = [request(p, max_tokens=10, request_id=f"prefill-{i}") for i, p in enumerate(prompts)]
    with caplog.at_level(logging.ERROR, logger="engine.generation.core.prefill.prefiller"):
        async with held(engine):  # the faulty one first: it leads the shared forward of short prompts
            tasks = await submit_in_order(stub, engine, reqs)
        results = await asyncio.gather(*tasks, return_exceptions=True)
    solo = [None] + [(await generate(stub, request(p, max_tokens=10))).token_ids for p in prompts[1:]]
    assert isinstance(results[0], grpc.aio.AioRpcError) and results[0].code() == grpc.StatusCode.INTERNAL
    for prompt, out, expected in zip(prompts[1:], results[1:], solo[1:]):
        assert not isinstance(out, BaseException), (prompt, out)
        assert out.token_ids == expected, prompt
    assert any("shared prefill" in r.getMessage() for r in caplog.records)  # the batched path was taken
    await settled(server, "llama")


@pytest.mark.parametrize("name", ["short"])
async def test_the_engine_serves_on_after_row_faults(stub, server, oracle, name):
    out = await generate(stub, request(ORACLE_PROMPTS[name], max_tokens=ORACLE_TOKENS[name]))
    assert out.token_ids == oracle["llama"][name]
