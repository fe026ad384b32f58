"""The preparation pool: its own threads, a bound on jobs held and a share per tenant, refusals
at once with a retry delay; one pool for every engine of a ModelSet, Generate's prompt prepared
on it."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from engine.generation.frontend.engine import GenerationEngine
from engine.models import ModelSet
from engine.preparation import Preparation, PreparationFull
from engine.requests import GenerationRequest, StopOptions, TextPrompt
from engine.tenancy import Tenant
from service.status import to_status

A, B = Tenant("a"), Tenant("b")


async def held_job(pool: Preparation, tenant: Tenant, release: threading.Event) -> asyncio.Task:
    """A job running on the pool until ``release`` is set (running before this returns)."""
    started = threading.Event()

    def job():
        started.set()
        release.wait(30)
        return threading.current_thread().name

    task = asyncio.ensure_future(pool.run(tenant, job))
    for _ in range(3000):
        if started.is_set():
            return task
        await asyncio.sleep(0.001)
    raise AssertionError("the job never started")


def status_details(status: grpc.Status) -> dict[str, object]:
    """The google.rpc details of a status, by type name."""
    raw = dict(status.trailing_metadata)["grpc-status-details-bin"]
    found: dict[str, object] = {}
    for any_msg in status_pb2.Status.FromString(raw).details:
        for cls in (error_details_pb2.ErrorInfo, error_details_pb2.RetryInfo):
            if any_msg.Is(cls.DESCRIPTOR):
                found[cls.DESCRIPTOR.name] = cls()
                any_msg.Unpack(found[cls.DESCRIPTOR.name])
    return found


async def test_a_full_pool_refuses_at_once_with_a_retry_delay():
    pool = Preparation(threads=1, queue=1, tenant_share=2)
    release = threading.Event()
    running = await held_job(pool, A, release)
    waiting = asyncio.ensure_future(pool.run(B, lambda: "queued"))
    await asyncio.sleep(0)
    assert pool.held == 2
    with pytest.raises(PreparationFull) as full:
        await pool.run(B, lambda: "refused")
    status = to_status(full.value)
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    info = status_details(status)
    assert info["ErrorInfo"].reason == "PREPARATION_FULL" and "RetryInfo" in info
    release.set()
    assert (await running).startswith("prepare")  # the pool's own thread, not the loop's executor
    assert await waiting == "queued"
    assert pool.held == 0 and await pool.run(B, lambda: "again") == "again"
    pool.close()


async def test_one_tenant_holds_at_most_its_share():
    pool = Preparation(threads=1, queue=8, tenant_share=2)
    release = threading.Event()
    first = await held_job(pool, A, release)
    second = asyncio.ensure_future(pool.run(A, lambda: "second"))
    await asyncio.sleep(0)
    with pytest.raises(PreparationFull, match="tenant 'a'"):
        await pool.run(A, lambda: "third")
    other = asyncio.ensure_future(pool.run(B, lambda: "other"))  # another tenant still gets a slot
    release.set()
    assert await second == "second" and await other == "other"
    await first
    pool.close()


def test_the_default_share_is_half_the_pool():
    assert Preparation(threads=4, queue=60).tenant_share == 32
    assert Preparation(threads=1, queue=0).tenant_share == 1


async def test_a_model_set_shares_one_pool_and_generate_prepares_on_it(fixture_models):
    engines = [GenerationEngine(str(fixture_models["llama"]), name=f"llama-{i}") for i in range(2)]
    pool = Preparation(threads=2, queue=4)
    models = ModelSet(engines, [], preparation=pool)
    assert all(e.preparation is pool for e in engines)
    await models.start()
    try:
        threads: list[str] = []
        prepare = engines[0]._prepare
        engines[0]._prepare = lambda request: (threads.append(threading.current_thread().name), prepare(request))[1]
        request = GenerationRequest(prompt=TextPrompt("Hello"), tenant=A, stopping=StopOptions(max_tokens=2))
        events = [e async for e in engines[0].generate(request)]
        assert events and threads and threads[0].startswith("prepare")
    finally:
        await models.close()
