"""Cancellation from every direction leaves no row, lease or KV memory behind."""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.helpers import details, generate, request

LONG = 3000  # tokens: far more than any test waits for


async def settled(server, name="llama", timeout=10.0):
    """Waits until the engine holds nothing: no waiting or running request, no memory
    reservation, no row, no KV, no stream the event loop still tracks."""
    engine = server["models"].generator(name)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        stats = await engine.stats()
        if (stats.waiting, stats.running, stats.reserved, stats.reserved_bytes, stats.rows, stats.kv_bytes,
                stats.tracked, stats.in_flight) == (0, 0, 0, 0, 0, 0, 0, 0):
            return stats
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"engine did not settle: {stats}")
        await asyncio.sleep(0.02)


async def read_rest(call) -> list:
    events = []
    while (msg := await call.read()) is not grpc.aio.EOF:
        events.append(msg)
    return events


async def read_until_delta(call):
    while True:
        msg = await call.read()
        if msg.WhichOneof("event") == "delta":
            return


async def test_cancel_rpc_ends_a_running_stream(stub, server):
    call = stub.Generate(request("Hello", max_tokens=LONG, request_id="cancel-running"))
    await read_until_delta(call)
    assert (await stub.Cancel(pb.CancelRequest(request_id="cancel-running"))).cancelled
    events = await read_rest(call)
    assert events[-1].finished.reason == gen_pb.FINISH_REASON_CANCELLED
    assert (await stub.Cancel(pb.CancelRequest(request_id="cancel-running"))).cancelled is False
    await settled(server)


async def test_client_drop_releases_the_row(stub, server):
    call = stub.Generate(request("Hello", max_tokens=LONG))
    await read_until_delta(call)
    call.cancel()
    await settled(server)


async def test_deadline_is_deadline_exceeded_and_releases_the_row(stub, server):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request("Hello", max_tokens=LONG), timeout=0.5)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await settled(server)


async def test_queue_full_is_resource_exhausted_at_once_and_queued_cancel_works(stub, server):
    engine = server["models"].generator("llama")
    capacity, queue = engine.config.scheduler.max_active, engine.config.scheduler.max_queued
    running = [stub.Generate(request("Hello", max_tokens=LONG, request_id=f"fill-{i}")) for i in range(capacity)]
    for call in running:
        await read_until_delta(call)
    queued = [stub.Generate(request("Hello", max_tokens=LONG, request_id=f"wait-{i}")) for i in range(queue)]
    while (await engine.stats()).waiting < queue:
        await asyncio.sleep(0.01)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(generate(stub, request("Hello", max_tokens=4)), timeout=5)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details(err.value)["RetryInfo"].retry_delay.ToMilliseconds() > 0
    # Cancelling a queued request ends its stream without ever starting it.
    assert (await stub.Cancel(pb.CancelRequest(request_id="wait-0"))).cancelled
    events = await read_rest(queued[0])
    assert [e.WhichOneof("event") for e in events] == ["finished"]
    assert events[0].finished.reason == gen_pb.FINISH_REASON_CANCELLED
    # FIFO: freeing one running slot admits wait-1 (the next in line), not a later one.
    await stub.Cancel(pb.CancelRequest(request_id="fill-0"))
    first = await queued[1].read()
    assert first.started.request_id == "wait-1"
    for call in running + queued:
        call.cancel()
    await settled(server)


@pytest.mark.plumbing  # bookkeeping under cancels, not numerics
async def test_a_thousand_random_cancellations_leave_nothing_behind(stub, server):
    """1,000 requests cancelled at random moments (queued, prefilling, decoding), by
    dropping the call or by the Cancel RPC, in waves that overflow the queue."""
    rng = random.Random(7)
    outcomes = {"finished": 0, "cancelled": 0, "dropped": 0, "rejected": 0}

    async def one(i: int):
        rid = f"stress-{i}"
        prompt = "word " * rng.randint(1, 60)
        call = stub.Generate(request(prompt, max_tokens=rng.randint(1, 40), request_id=rid))
        delay = rng.random() * 0.15
        by_rpc = rng.random() < 0.5

        async def consume():
            return [m async for m in call]

        task = asyncio.ensure_future(consume())
        await asyncio.sleep(delay)
        if by_rpc:
            await stub.Cancel(pb.CancelRequest(request_id=rid))
        else:
            call.cancel()
        try:
            events = await task
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                outcomes["rejected"] += 1
                return
            assert err.code() == grpc.StatusCode.CANCELLED, err
            outcomes["dropped"] += 1
            return
        except asyncio.CancelledError:
            outcomes["dropped"] += 1
            return
        reason = events[-1].finished.reason
        assert reason in (gen_pb.FINISH_REASON_CANCELLED, gen_pb.FINISH_REASON_LENGTH)
        outcomes["cancelled" if reason == gen_pb.FINISH_REASON_CANCELLED else "finished"] += 1

    for wave in range(40):
        await asyncio.gather(*(one(wave * 25 + i) for i in range(25)))
    assert sum(outcomes.values()) == 1000
    assert outcomes["cancelled"] > 0 and outcomes["dropped"] > 0
    await settled(server)
    # The engine still serves correctly afterwards.
    out = await generate(stub, request("Hello world", max_tokens=5))
    assert len(out.token_ids) == 5
