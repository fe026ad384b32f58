"""Roles by need, on a live server with tenants acme and beta (inference), a gateway's router
token and an operator's admin token: KV events and FlushCache only for router and admin, load
figures of other tenants only for them, server paths only for admins, no admin on a tokenless
server unless --admin-loopback (--anonymous-role router gives a tokenless gateway the router role),
metrics on loopback by default, Abort answered while draining."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
from smg_grpc_proto import mlx_engine_pb2_grpc as mlx_grpc
from smg_grpc_proto import vllm_engine_pb2 as vllm_pb
from smg_grpc_proto import vllm_engine_pb2_grpc as vllm_grpc
from smg_grpc_proto.generated import common_pb2

from service import cli
from service.bearer_tokens import load_table
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.interceptors import ServerState
from service.metrics import Metrics
from service.server import ServerOptions
from tests.helpers import details
from tests.test_ops_security import bearer
from tests.test_tenants_auth import tenant_server

TOKENS_FILE = """\
acme-app    acme  inference
beta-app    beta  inference
smg-token   smg   router
ops-token   ops   admin
"""
LONG = 3000  # tokens: far more than any test waits for; such a request ends by Abort
SECRET = "The acquisition of the northern harbour closes on the ninth; tell nobody outside the board. "
KV_EVENTS = "/vllm.grpc.engine.VllmEngine/SubscribeKvEvents"


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(TOKENS_FILE)
    return load_table(path, {})


def long_request(request_id: str, text: str = "Once upon a time") -> vllm_pb.GenerateRequest:
    return vllm_pb.GenerateRequest(request_id=request_id, text=text, stream=True, sampling_params=vllm_pb.SamplingParams(
        temperature=0.0, max_tokens=LONG, ignore_eos=True))


async def started(call) -> None:
    """Waits for a streamed Generate's first chunk: the request runs."""
    first = await asyncio.wait_for(call.read(), 60)
    assert first.WhichOneof("response") == "chunk"


async def finish_reason(call) -> str:
    while (reply := await asyncio.wait_for(call.read(), 60)) is not grpc.aio.EOF:
        if reply.WhichOneof("response") == "complete":
            return reply.complete.finish_reason
    raise AssertionError("the stream ended without a GenerateComplete")


async def refused(call, code=grpc.StatusCode.PERMISSION_DENIED) -> str:
    """The ErrorInfo reason of a call (unary or streamed) that must fail with ``code``."""
    async def ended() -> None:
        if hasattr(call, "__aiter__"):
            [r async for r in call]
        else:
            await call

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(ended(), 30)  # a stream that is not refused would run on
    assert err.value.code() == code, err.value.details()
    return details(err.value)["ErrorInfo"].reason


def test_the_tokens_file_gives_the_router_role(table):
    acme, smg, ops = (table.identify(t) for t in ("acme-app", "smg-token", "ops-token"))
    assert (acme.role, acme.router, acme.admin) == ("inference", False, False)
    assert (smg.role, smg.router, smg.admin) == ("router", True, False)
    assert (ops.role, ops.router, ops.admin) == ("admin", True, True)
    assert smg.tenant.name == "smg"


async def test_only_the_router_and_admin_receive_kv_events_and_flush(server, table):
    block = server["models"].generator("llama").blocks.block_size
    async with tenant_server(server["models"], ServerOptions(auth_table=table)) as (ch, recorder, _):
        worker, stub = vllm_grpc.VllmEngineStub(ch), pb_grpc.InferenceServiceStub(ch)
        router = worker.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(load_records_before_first_batch=True),
                                          metadata=bearer("smg-token"))
        await asyncio.wait_for(router.read(), 10)  # subscribed: a snapshot or a load record
        prompt = SECRET * 3
        ids = list((await stub.Tokenize(pb.TokenizeRequest(model="llama", text=prompt),
                                        metadata=bearer("acme-app"))).token_ids)
        acme = worker.Generate(long_request("acme-secret", prompt), metadata=bearer("acme-app"))
        await started(acme)
        for token in ("beta-app", "acme-app"):  # while acme generates: no tenant's tokens for an inference token
            request = common_pb2.SubscribeKvEventsRequest(load_records_before_first_batch=True)
            assert await refused(worker.SubscribeKvEvents(request, metadata=bearer(token))) == "ROUTER_ROLE_REQUIRED"
            assert await refused(worker.FlushCache(common_pb2.FlushCacheRequest(),
                                                   metadata=bearer(token))) == "ROUTER_ROLE_REQUIRED"
        raw = ch.unary_stream(KV_EVENTS, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        assert await refused(raw(b"\xff\xff\xff", metadata=bearer("beta-app"))) == "ROUTER_ROLE_REQUIRED"  # unparsed
        stored = []
        while sum(len(b.token_ids) for b in stored) < len(ids) // block * block:  # the router sees acme's blocks
            batch = await asyncio.wait_for(router.read(), 10)
            stored += [b for e in batch.events if e.HasField("stored") for b in e.stored.blocks]
        assert [t for b in stored for t in b.token_ids][:len(ids) // block * block] == ids[:len(ids) // block * block]
        await worker.Abort(vllm_pb.AbortRequest(request_ids=["acme-secret"]), metadata=bearer("acme-app"))
        assert await finish_reason(acme) == "abort"
        router.cancel()
        for token in ("smg-token", "ops-token"):
            assert (await worker.FlushCache(common_pb2.FlushCacheRequest(), metadata=bearer(token))).success
        admin = worker.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(load_records_before_first_batch=True),
                                         metadata=bearer("ops-token"))
        assert (await asyncio.wait_for(admin.read(), 10)).load.max_running_requests == 8
        admin.cancel()
        # the router's one token also generates (SMG sends every call with it)
        replies = [r async for r in worker.Generate(vllm_pb.GenerateRequest(
            text="Hello", stream=False, sampling_params=vllm_pb.SamplingParams(temperature=0.0, max_tokens=2,
                                                                             ignore_eos=True)),
            metadata=bearer("smg-token"))]
        assert len(replies[-1].complete.output_ids) == 2
        await asyncio.sleep(0.05)
    denied = {(c.method.rpartition("/")[2], c.tenant) for c in recorder.calls if c.code == "PERMISSION_DENIED"}
    assert {("SubscribeKvEvents", "beta"), ("FlushCache", "acme")} <= denied


async def test_load_figures_show_an_inference_tenant_only_its_own_requests(server, table):
    async with tenant_server(server["models"], ServerOptions(auth_table=table)) as (ch, _, _):
        worker, narrow = vllm_grpc.VllmEngineStub(ch), mlx_grpc.MlxEngineStub(ch)
        acme = worker.Generate(long_request("acme-long"), metadata=bearer("acme-app"))
        await started(acme)

        async def loads(token: str) -> vllm_pb.SchedulerLoad:
            (load,) = (await worker.GetLoads(vllm_pb.GetLoadsRequest(), metadata=bearer(token))).loads
            return load

        async def active(token: str) -> tuple[int, int]:
            return ((await worker.GetServerInfo(vllm_pb.GetServerInfoRequest(), metadata=bearer(token))).active_requests,
                    (await narrow.GetServerInfo(mlx_pb.GetServerInfoRequest(), metadata=bearer(token))).active_requests)

        beta = await loads("beta-app")
        assert (beta.num_running_reqs, beta.num_waiting_reqs, beta.num_total_reqs) == (0, 0, 0)
        assert (beta.num_used_tokens, beta.token_usage, beta.gen_throughput, beta.utilization) == (0, 0.0, 0.0, 0.0)
        assert beta.max_running_requests == 8 and beta.max_total_num_tokens > 0  # capacities, not load
        assert await active("beta-app") == (0, 0)
        own = await loads("acme-app")
        assert (own.num_running_reqs, own.num_total_reqs) == (1, 1) and await active("acme-app") == (1, 1)
        for token in ("smg-token", "ops-token"):  # every tenant's
            assert (await loads(token)).num_running_reqs >= 1 and (await loads(token)).num_used_tokens > 0
            assert min(await active(token)) >= 1

        async def tenants_in_get_load(token: str) -> set[str]:
            reply = await pb_grpc.InferenceServiceStub(ch).GetLoad(pb.GetLoadRequest(), metadata=bearer(token))
            return {t.tenant for m in reply.models for t in m.tenants}

        assert await tenants_in_get_load("beta-app") <= {"beta"}  # never acme's figures
        for token in ("smg-token", "ops-token"):  # the router and admin roles see every tenant's
            assert "acme" in await tenants_in_get_load(token)
        await worker.Abort(vllm_pb.AbortRequest(request_ids=["acme-long"]), metadata=bearer("beta-app"))
        assert (await loads("acme-app")).num_running_reqs == 1  # beta's Abort does not reach acme's request
        await worker.Abort(vllm_pb.AbortRequest(request_ids=["acme-long"]), metadata=bearer("acme-app"))
        assert await finish_reason(acme) == "abort"


async def test_server_paths_reach_only_admins(server, table):
    async with tenant_server(server["models"], ServerOptions(auth_table=table)) as (ch, _, _):
        stub = pb_grpc.InferenceServiceStub(ch)
        for token, admin in (("acme-app", False), ("smg-token", False), ("ops-token", True)):
            auth = bearer(token)
            for contract, messages in ((vllm_grpc.VllmEngineStub(ch), vllm_pb), (mlx_grpc.MlxEngineStub(ch), mlx_pb)):
                info = await contract.GetModelInfo(messages.GetModelInfoRequest(), metadata=auth)
                assert info.served_model_name == "llama", token
                # the served name stands in for the path (SMG registers no model without one)
                assert (info.model_path == "llama") != admin and (info.model_path.endswith("/llama") == admin), token
            model = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"), metadata=auth)).info
            assert model.graph.id and bool(model.graph.artifact) == admin and bool(model.source) == admin, token
            listed = (await stub.ListModels(pb.ListModelsRequest(), metadata=auth)).models
            assert listed and all(bool(m.graph.artifact) == admin for m in listed), token


async def test_a_tokenless_server_has_no_admin_unless_admin_loopback(server, fixture_adapters, table):
    path = str(fixture_adapters["small"])
    async with tenant_server(server["models"]) as (ch, _, _):
        stub, worker = pb_grpc.InferenceServiceStub(ch), vllm_grpc.VllmEngineStub(ch)
        assert await refused(stub.LoadAdapter(pb.LoadAdapterRequest(model="llama", name="x", path=path))) \
            == "ADMIN_ROLE_REQUIRED"
        raw = ch.unary_unary("/mlxgrpc.v1.InferenceService/UnloadAdapter", request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)
        assert await refused(raw(b"\xff\xff\xff")) == "ADMIN_ROLE_REQUIRED"  # before the request is parsed
        assert await refused(worker.FlushCache(common_pb2.FlushCacheRequest())) == "ROUTER_ROLE_REQUIRED"
        assert await refused(worker.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(
            load_records_before_first_batch=True))) == "ROUTER_ROLE_REQUIRED"
        models = (await stub.ListModels(pb.ListModelsRequest())).models
        assert models and not any(m.source or m.graph.artifact for m in models)
        assert (await worker.GetModelInfo(vllm_pb.GetModelInfoRequest())).model_path == "llama"
    async with tenant_server(server["models"], ServerOptions(admin_loopback=True)) as (ch, _, _):
        stub, worker = pb_grpc.InferenceServiceStub(ch), vllm_grpc.VllmEngineStub(ch)
        assert (await stub.LoadAdapter(pb.LoadAdapterRequest(model="llama", name="local", path=path))).adapter.source
        await stub.UnloadAdapter(pb.UnloadAdapterRequest(model="llama", name="local"))
        assert (await worker.FlushCache(common_pb2.FlushCacheRequest())).success
        events = worker.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(load_records_before_first_batch=True))
        assert (await asyncio.wait_for(events.read(), 10)).load.max_running_requests == 8
        events.cancel()
    # a gateway that sends no token (SMG) may hold the router role on a tokenless replica: never admin
    async with tenant_server(server["models"], ServerOptions(anonymous_role="router")) as (ch, _, _):
        stub, worker = pb_grpc.InferenceServiceStub(ch), vllm_grpc.VllmEngineStub(ch)
        assert (await worker.FlushCache(common_pb2.FlushCacheRequest())).success
        events = worker.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(load_records_before_first_batch=True))
        assert (await asyncio.wait_for(events.read(), 10)).load.max_running_requests == 8
        events.cancel()
        assert await refused(stub.LoadAdapter(pb.LoadAdapterRequest(model="llama", name="x", path=path))) \
            == "ADMIN_ROLE_REQUIRED"
        assert (await worker.GetModelInfo(vllm_pb.GetModelInfoRequest())).model_path == "llama"
    # with tokens the flags change nothing: roles decide, wherever the caller is
    options = ServerOptions(auth_table=table, admin_loopback=True, anonymous_role="router")
    async with tenant_server(server["models"], options) as (ch, _, _):
        worker = vllm_grpc.VllmEngineStub(ch)
        assert await refused(worker.FlushCache(common_pb2.FlushCacheRequest(), metadata=bearer("acme-app"))) \
            == "ROUTER_ROLE_REQUIRED"
        assert await refused(worker.FlushCache(common_pb2.FlushCacheRequest()), grpc.StatusCode.UNAUTHENTICATED)


def test_the_role_flags_and_metrics_listening_on_loopback_by_default():
    parser = cli.build_parser()
    defaults = cli.server_options(parser.parse_args(["serve"]), parser)
    assert defaults.metrics_host == "127.0.0.1" and not defaults.admin_loopback
    assert defaults.anonymous_role == "inference"
    assert cli.server_options(parser.parse_args(["serve", "--admin-loopback"]), parser).admin_loopback
    assert cli.server_options(parser.parse_args(["serve", "--anonymous-role", "router"]), parser).anonymous_role \
        == "router"
    with pytest.raises(SystemExit):  # never admin without a token beyond loopback
        parser.parse_args(["serve", "--anonymous-role", "admin"])
    metrics = Metrics()
    try:
        metrics.serve_http(0)
        assert metrics._http[0].server_address[0] == "127.0.0.1"
    finally:
        metrics.close()


async def test_abort_is_answered_while_draining(server, table):
    state = ServerState()
    async with tenant_server(server["models"], ServerOptions(auth_table=table), state=state) as (ch, _, _):
        worker, narrow = vllm_grpc.VllmEngineStub(ch), mlx_grpc.MlxEngineStub(ch)
        auth = bearer("acme-app")
        full = worker.Generate(long_request("drained-vllm"), metadata=auth)
        await started(full)
        state.draining = True
        try:
            assert await refused(worker.Generate(long_request("late"), metadata=auth),
                                 grpc.StatusCode.UNAVAILABLE) == "DRAINING"
            await worker.Abort(vllm_pb.AbortRequest(request_ids=["drained-vllm"]), metadata=auth)
            assert await finish_reason(full) == "abort"
            await narrow.Abort(mlx_pb.AbortRequest(request_ids=["nothing-running"]), metadata=auth)
        finally:
            state.draining = False
