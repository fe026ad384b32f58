"""GetLoad and its Prometheus twin: running and waiting requests, KV memory against
the budget, the prefix cache and recent throughput, per generation model."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from engine.generation.core.scheduling.throughput import TokenRate
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.conftest import FIXTURE_KINDS
from tests.helpers import generate, request
from tests.test_ops_observability import metered_server, scrape, value


async def load_of(stub, model: str) -> pb.ModelLoad:
    return (await stub.GetLoad(pb.GetLoadRequest(model=model))).models[0]


async def test_every_generation_model_reports_its_load(stub, server):
    reply = await stub.GetLoad(pb.GetLoadRequest())
    names = [m.name for m in server["models"].generation]
    assert [m.model for m in reply.models] == names and set(FIXTURE_KINDS) <= set(names)
    assert reply.uptime_seconds > 0
    idle = {m.model: m for m in reply.models}["qwen3"]
    assert idle.max_running_requests == 8 and idle.memory_budget_bytes > 0
    assert (idle.running_requests, idle.waiting_requests, idle.kv_cache_bytes, idle.reserved_bytes) == (0, 0, 0, 0)


async def test_unknown_and_embedding_models_are_refused(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetLoad(pb.GetLoadRequest(model="no-such-model"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetLoad(pb.GetLoadRequest(model="qwen3-embed"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def until(stub, model: str, ready, timeout: float = 15.0) -> pb.ModelLoad:
    """Polls GetLoad until ``ready(load)``; fails after ``timeout`` seconds."""
    for _ in range(int(timeout / 0.05)):
        load = await load_of(stub, model)
        if ready(load):
            return load
        await asyncio.sleep(0.05)
    raise AssertionError(f"load never got there: {load}")


async def test_running_waiting_memory_and_throughput_follow_the_work(stub):
    before = await load_of(stub, "qwen3")
    calls = [stub.Generate(request(f"Story number {i}", model="qwen3", max_tokens=2000)) for i in range(10)]
    # any 8 start (arrival order is not submission order); the other 2 wait for a slot
    busy = await until(stub, "qwen3", lambda load: (load.running_requests, load.waiting_requests) == (8, 2), 30)
    for call in calls:
        call.cancel()
    assert 0 < busy.kv_cache_bytes <= busy.reserved_bytes <= busy.memory_budget_bytes

    out = await generate(stub, request("Counting tokens", model="qwen3", max_tokens=30))
    after = await until(stub, "qwen3", lambda load: load.running_requests == 0)
    assert (after.waiting_requests, after.kv_cache_bytes) == (0, 0)
    assert after.generated_tokens - before.generated_tokens >= len(out.token_ids) + 8
    assert after.generated_tokens_per_second > 0


async def test_prefix_cache_figures(stub):
    before = await load_of(stub, "llama")
    prompt = "The keeper of the lighthouse wrote down every boat that passed the rocks that night."
    first = await generate(stub, request(prompt, max_tokens=3))
    second = await generate(stub, request(prompt, max_tokens=3))
    after = await load_of(stub, "llama")
    assert second.started.cached_tokens > first.started.cached_tokens
    assert after.prefix_cache_hits >= before.prefix_cache_hits + 1
    assert after.prefix_cache_entries >= 1 and after.prefix_cache_bytes > 0
    lookups = after.prefix_cache_hits + after.prefix_cache_misses
    assert after.prefix_cache_hit_rate == pytest.approx(after.prefix_cache_hits / lookups)


async def test_prometheus_shows_the_same_figures(server):
    async with metered_server(server["models"]) as (stub, http_port):
        await generate(stub, request("Figures for the scrape", max_tokens=4))
        m = await scrape(http_port)
        load = await load_of(stub, "llama")
    gauges = {"mlxgrpc_max_running_requests": load.max_running_requests,
              "mlxgrpc_kv_cache_bytes": load.kv_cache_bytes, "mlxgrpc_reserved_bytes": load.reserved_bytes,
              "mlxgrpc_memory_budget_bytes": load.memory_budget_bytes,
              "mlxgrpc_prefix_cache_entries": load.prefix_cache_entries,
              "mlxgrpc_prefix_cache_bytes": load.prefix_cache_bytes,
              "mlxgrpc_prefix_cache_hit_rate": load.prefix_cache_hit_rate}
    assert {name: value(m, name, model="llama") for name in gauges} == pytest.approx(gauges)
    assert value(m, "mlxgrpc_prefix_cache_lookups_total", model="llama", result="hit") == load.prefix_cache_hits
    assert value(m, "mlxgrpc_prefix_cache_lookups_total", model="llama", result="miss") == load.prefix_cache_misses
    assert value(m, "mlxgrpc_generation_tokens_per_second", model="llama") > 0
    assert ("mlxgrpc_kv_cache_bytes", (("model", "qwen3-embed"),)) not in m  # generation models only


def test_token_rate_counts_a_sliding_window():
    now = [100.0]
    rate = TokenRate(window_s=10.0, clock=lambda: now[0])
    assert rate.per_second() == 0.0
    rate.add(30)
    now[0] = 105.0
    rate.add(20)
    assert rate.per_second() == 5.0
    now[0] = 110.5  # the first 30 left the window
    assert rate.per_second() == 2.0
    now[0] = 200.0
    assert rate.per_second() == 0.0
    with pytest.raises(ValueError):
        TokenRate(window_s=0)
