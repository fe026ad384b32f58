"""Loading, listing and unloading adapters while serving: descriptions, refusals,
unloading an adapter in use (it waits), the limit (least recently used idle
adapters go), auth, and the command line's --adapter."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from engine import kernels
from service import cli
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.gen.mlxgrpc.v1 import model_pb2 as model_pb
from service.server import ServerOptions, create_server
from tests.adapter_helpers import Held, keep_only, listed
from tests.conftest import MAX_ADAPTERS
from tests.helpers import details, generate, request


async def test_adapters_are_described_by_list_model_info_and_the_memory_plan(adapter_server, fixture_adapters,
                                                                             tmp_path_factory):
    stub = adapter_server["stub"]
    await keep_only(stub, "llama", ["tone", "qv", "dora"], fixture_adapters)
    reply = await stub.ListAdapters(pb.ListAdaptersRequest(model="llama"))
    assert reply.model == "llama" and reply.max_adapters == MAX_ADAPTERS
    got = {a.name: a for a in reply.adapters}
    assert got["tone"].kind == model_pb.ADAPTER_KIND_LORA and got["dora"].kind == model_pb.ADAPTER_KIND_DORA
    assert (got["tone"].rank, got["tone"].scale, got["tone"].layers) == (4, 2.0, 14)  # 7 linears x 2 blocks
    assert (got["qv"].rank, got["qv"].layers) == (8, 2)  # q and v of the last block
    # q [64 -> 64] and v [64 -> 32], rank 8, float32. With the CPU kernels q, k and v are
    # one fused layer: A [64, 16] side by side, B [16, 128] spanning its columns (k's zero).
    qv_bytes = 4 * (64 * 16 + 16 * 128) if kernels.enabled() else 4 * 8 * (64 + 64 + 64 + 32)
    root = tmp_path_factory.getbasetemp()  # the adapter root: sources are shown relative to it
    assert got["qv"].source == fixture_adapters["qv"].relative_to(root).as_posix() and got["qv"].bytes == qv_bytes
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"))).info
    assert [a.name for a in info.adapters] == [a.name for a in reply.adapters] and info.max_adapters == MAX_ADAPTERS
    plan = (await stub.PlanMemory(pb.PlanMemoryRequest(model="llama", context_tokens=512))).plan
    assert plan.adapter_bytes >= sum(a.bytes for a in reply.adapters)
    await keep_only(stub, "llama", ["tone"], fixture_adapters)
    smaller = (await stub.PlanMemory(pb.PlanMemoryRequest(model="llama", context_tokens=512))).plan
    assert plan.weights_bytes - smaller.weights_bytes == plan.adapter_bytes - smaller.adapter_bytes > 0


async def test_requests_for_adapters_that_are_not_loaded_are_refused(adapter_server):
    stub = adapter_server["stub"]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request("Hello", model="llama", adapter="nope"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    info = details(err.value)["ErrorInfo"]
    assert info.reason == "ADAPTER_NOT_FOUND" and info.metadata["adapter"] == "nope"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request("Hello", model="llama", adapter="no such name"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["BadRequest"].field_violations[0].field == "adapter"


async def test_loads_that_cannot_work_are_refused_saying_why(adapter_server, fixture_adapters, tmp_path):
    stub = adapter_server["stub"]
    await keep_only(stub, "llama", ["tone"], fixture_adapters)

    async def refused(name, path, model="llama"):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.LoadAdapter(pb.LoadAdapterRequest(model=model, name=name, path=str(path)))
        return err.value

    misfit = await refused("other", fixture_adapters["other"])  # made for qwen3
    assert misfit.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert details(misfit)["ErrorInfo"].reason == "ADAPTER_MISMATCH"
    assert "does not fit model 'llama'" in misfit.details() and "differ in shape" in misfit.details()
    bad = await refused("empty", tmp_path)
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT and "not an adapter directory" in bad.details()
    assert details(bad)["BadRequest"].field_violations[0].field == "path"
    taken = await refused("tone", fixture_adapters["small"])
    assert taken.code() == grpc.StatusCode.ALREADY_EXISTS
    assert (await refused("x", fixture_adapters["tone"], model="ghost")).code() == grpc.StatusCode.NOT_FOUND
    assert list(await listed(stub, "llama")) == ["tone"]  # nothing half-loaded


async def test_unloading_an_adapter_in_use_waits_for_its_requests(adapter_server, fixture_adapters):
    stub = adapter_server["stub"]
    await keep_only(stub, "llama", ["small"], fixture_adapters)
    held = Held(stub, "small")
    await held.running()
    unload = asyncio.ensure_future(stub.UnloadAdapter(pb.UnloadAdapterRequest(model="llama", name="small")))
    while not (await listed(stub, "llama"))["small"].unloading:
        await asyncio.sleep(0.01)
    with pytest.raises(grpc.aio.AioRpcError) as err:  # no new request may take it meanwhile
        await generate(stub, request("Hello", model="llama", adapter="small"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    await held.running(more=5)  # the request using it goes on
    assert not unload.done() and (await listed(stub, "llama"))["small"].active_requests == 1
    finished = await held.release()
    assert finished.reason == gen_pb.FINISH_REASON_CANCELLED
    assert (await unload).adapter.name == "small"
    assert "small" not in await listed(stub, "llama")


async def test_an_unload_whose_call_ends_early_still_completes(adapter_server, fixture_adapters):
    stub = adapter_server["stub"]
    await keep_only(stub, "llama", ["small"], fixture_adapters)
    held = Held(stub, "small")
    await held.running()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.UnloadAdapter(pb.UnloadAdapterRequest(model="llama", name="small"), timeout=0.2)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await held.running(more=2)
    await held.release()
    for _ in range(200):
        if "small" not in await listed(stub, "llama"):
            break
        await asyncio.sleep(0.01)
    assert "small" not in await listed(stub, "llama")


async def test_beyond_the_limit_the_least_recently_used_idle_adapter_goes(adapter_server, fixture_adapters):
    stub = adapter_server["stub"]
    await keep_only(stub, "llama", ["tone", "qv", "dora"], fixture_adapters)
    for name in ("dora", "tone", "qv"):  # "dora" is now the least recently used
        await generate(stub, request("Hi", model="llama", adapter=name, max_tokens=2))
    path = str(fixture_adapters["small"])
    reply = await stub.LoadAdapter(pb.LoadAdapterRequest(model="llama", name="small", path=path))
    assert list(reply.evicted) == ["dora"] and reply.adapter.name == "small"
    assert set(await listed(stub, "llama")) == {"tone", "qv", "small"}
    busy = [Held(stub, name) for name in ("tone", "qv", "small")]
    for held in busy:
        await held.running()
    with pytest.raises(grpc.aio.AioRpcError) as err:  # every adapter is in use: nothing may go
        await stub.LoadAdapter(pb.LoadAdapterRequest(model="llama", name="dora", path=str(fixture_adapters["dora"])))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details(err.value)["ErrorInfo"].reason == "ADAPTER_CAPACITY" and "RetryInfo" in details(err.value)
    for held in busy:
        await held.release()
    reply = await stub.LoadAdapter(pb.LoadAdapterRequest(model="llama", name="dora", path=str(fixture_adapters["dora"])))
    assert len(reply.evicted) == 1  # idle again: one may go


async def test_adapter_calls_need_the_token_like_every_call(adapter_server):
    srv, port = await create_server("127.0.0.1:0", adapter_server["models"],
                                    options=ServerOptions(auth_tokens=("adapter-token",)))
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.InferenceServiceStub(channel)
            calls = [stub.ListAdapters(pb.ListAdaptersRequest()),
                     stub.LoadAdapter(pb.LoadAdapterRequest(name="x", path="/tmp")),
                     stub.UnloadAdapter(pb.UnloadAdapterRequest(name="tone"))]
            for call in calls:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await call
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            ok = await stub.ListAdapters(pb.ListAdaptersRequest(model="lfm2"),
                                         metadata=(("authorization", "Bearer adapter-token"),))
            assert [a.name for a in ok.adapters] == ["hybrid"]
    finally:
        await srv.stop(0.5)


def test_the_command_line_assigns_adapters_to_models():
    args = cli.build_parser().parse_args(["serve", "--model", "a=/m/a", "--model", "/m/b", "--adapter", "x=/ad/x",
                                          "--adapter", "b:y=/ad/y", "--max-adapters", "2"])
    assert args.adapter == [("", "x", "/ad/x"), ("b", "y", "/ad/y")] and args.max_adapters == 2
    assert cli.adapters_by_model(args.adapter, ["a", "b"]) == {"a": (("x", "/ad/x"),), "b": (("y", "/ad/y"),)}
    with pytest.raises(ValueError, match="no generation model named 'c'"):
        cli.adapters_by_model([("c", "z", "/ad/z")], ["a", "b"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--adapter", "just-a-name"])
