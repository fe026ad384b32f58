"""Bounds and small guarantees around what callers may hold or stop: the concurrent-RPC
bound, Cancel and Abort while draining, Abort's cap on ids, the worker contract's
unstreamed reply against the message limit, and adapter metric series that leave
with their adapter."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
from smg_grpc_proto import mlx_engine_pb2_grpc as mlx_grpc

from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.interceptors import ServerState
from service.metrics import scrape
from service.server import ServerOptions
from service.worker.servicer import MAX_ABORT_IDS
from tests.helpers import details, generate, request
from tests.test_ops_security import bearer, list_services
from tests.test_tenants_auth import tenant_server


async def test_the_server_refuses_rpcs_beyond_its_bound(server):
    options = ServerOptions(max_concurrent_rpcs=1, auth_tokens=("bound",))  # anonymous streams count apart
    async with tenant_server(server["models"], options) as (ch, _, _):
        requests: asyncio.Queue = asyncio.Queue()

        async def pending():
            while (item := await requests.get()) is not None:
                yield item

        held = reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(pending(), metadata=bearer("bound"))
        await requests.put(reflection_pb2.ServerReflectionRequest(list_services=""))
        assert (await held.read()).list_services_response.service  # in flight until we close it
        stub = pb_grpc.InferenceServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListModels(pb.ListModelsRequest(), metadata=bearer("bound"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await requests.put(None)
        assert await held.read() is grpc.aio.EOF
        for _ in range(100):  # the bound frees once the server has finished the held call
            try:
                assert (await stub.ListModels(pb.ListModelsRequest(), metadata=bearer("bound"))).models
                break
            except grpc.aio.AioRpcError as late:
                assert late.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                await asyncio.sleep(0.02)
        else:
            pytest.fail("the bound never freed")
        assert "mlxgrpc.v1.InferenceService" in await list_services(ch, bearer("bound"))


async def test_cancel_and_abort_pass_while_draining(server):
    state = ServerState()
    async with tenant_server(server["models"], state=state) as (ch, _, _):
        state.draining = True
        stub, worker = pb_grpc.InferenceServiceStub(ch), mlx_grpc.MlxEngineStub(ch)
        assert not (await stub.Cancel(pb.CancelRequest(request_id="gone"))).cancelled
        assert await worker.Abort(mlx_pb.AbortRequest(request_ids=["gone"])) == mlx_pb.AbortResponse()
        with pytest.raises(grpc.aio.AioRpcError) as err:  # new work is still refused
            await generate(stub, request("Hello", max_tokens=2))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        state.draining = False


async def test_abort_names_at_most_its_cap_of_request_ids(channel):
    worker = mlx_grpc.MlxEngineStub(channel)
    assert await worker.Abort(mlx_pb.AbortRequest(request_ids=[f"r{i}" for i in range(MAX_ABORT_IDS)])) \
        == mlx_pb.AbortResponse()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await worker.Abort(mlx_pb.AbortRequest(request_ids=[f"r{i}" for i in range(MAX_ABORT_IDS + 1)]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["BadRequest"].field_violations[0].field == "request_ids"


async def test_an_unstreamed_worker_reply_over_the_message_limit_is_refused(server):
    limit = 2048
    async with tenant_server(server["models"], ServerOptions(max_message_bytes=limit)) as (ch, recorder, _):
        worker = mlx_grpc.MlxEngineStub(ch)
        sampling = mlx_pb.SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True, logprobs=5)
        streamed = [r async for r in worker.Generate(mlx_pb.GenerateRequest(
            text="Hello", stream=True, sampling_params=sampling))]
        assert sum(len(r.chunk.token_ids) for r in streamed if r.HasField("chunk")) == 64
        with pytest.raises(grpc.aio.AioRpcError) as err:
            _ = [r async for r in worker.Generate(mlx_pb.GenerateRequest(
                text="Hello", stream=False, sampling_params=sampling))]
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        info = details(err.value)["ErrorInfo"]
        assert info.reason == "RESPONSE_TOO_LARGE" and info.metadata["limit_bytes"] == str(limit)
        assert int(info.metadata["size_bytes"]) > limit
        small = mlx_pb.SamplingParams(temperature=0.0, max_tokens=3)
        replies = [r async for r in worker.Generate(mlx_pb.GenerateRequest(text="Hi", stream=False,
                                                                           sampling_params=small))]
        assert len(replies[-1].complete.output_ids) == 3


async def test_unloaded_adapters_leave_the_metrics(server, fixture_adapters):
    async with tenant_server(server["models"], ServerOptions(admin_loopback=True)) as (ch, _, metrics):
        stub = pb_grpc.InferenceServiceStub(ch)
        await stub.LoadAdapter(pb.LoadAdapterRequest(model="llama", name="metered",
                                                     path=str(fixture_adapters["small"])))
        out = await generate(stub, request("Hello", max_tokens=3, adapter="metered"))
        assert len(out.token_ids) == 3
        await asyncio.sleep(0.05)
        text = scrape(metrics.registry)
        assert 'mlxgrpc_adapter_generated_tokens_total{adapter="metered",model="llama"} 3.0' in text
        assert 'mlxgrpc_adapter_requests_total{adapter="metered",code="OK",model="llama"} 1.0' in text
        await stub.UnloadAdapter(pb.UnloadAdapterRequest(model="llama", name="metered"))
        assert "metered" not in scrape(metrics.registry)
