"""Call budgets on a live server: anonymous health streams have their own cap and never take
authenticated capacity, a tenant's open streams are capped (max_streams, else the server's flag),
a tenant's priority is capped (max_priority), health checks always answer, and GetLoad and the
Prometheus endpoint show the counts."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from smg_grpc_proto import mlx_engine_pb2_grpc as mlx_grpc
from smg_grpc_proto.generated import common_pb2

from service.bearer_tokens import parse_lines
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.metrics import Metrics, scrape
from service.server import ServerOptions, create_server
from tests.conftest import DECODER_EMBEDDER
from tests.helpers import details, generate, request
from tests.test_ops_security import bearer

TOKENS = """\
tok-alpha  alpha  inference  max_streams=2
tok-beta   beta   inference  max_priority=10
tok-ops    ops    admin
"""
LONG = 3000  # tokens: far more than a test waits for; such a stream ends when the test cancels it


def table():
    return parse_lines([(n, line) for n, line in enumerate(TOKENS.splitlines(), 1)], "tokens")


@contextlib.asynccontextmanager
async def budget_server(models, options: ServerOptions):
    """A started server with health SERVING, its channel and its metrics registry."""
    health_servicer, metrics = health.aio.HealthServicer(), Metrics(models)
    srv, port = await create_server("127.0.0.1:0", models, options=options, health_servicer=health_servicer,
                                    metrics=metrics)
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            yield ch, metrics.registry
    finally:
        await srv.stop(0.5)


async def open_watch(ch):
    """A Watch stream once its first status came (raises AioRpcError if refused)."""
    call = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(service=""))
    first = await call.read()
    assert first.status == health_pb2.HealthCheckResponse.SERVING
    return call


async def hold_generate(stub, token: str | None = None):
    """A long Generate stream once it started (raises AioRpcError if refused)."""
    req = request("Keep counting the boats", max_tokens=LONG)
    req.stopping.ignore_eos = True
    call = stub.Generate(req, metadata=bearer(token) if token else None)
    assert (await call.read()).WhichOneof("event") == "started"
    return call


def refused(err: grpc.aio.AioRpcError, reason: str):
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
    found = details(err)
    assert found["ErrorInfo"].reason == reason
    assert found["RetryInfo"].retry_delay.ToMilliseconds() > 0
    return found["ErrorInfo"]


def series(registry, name: str) -> float:
    lines = [line for line in scrape(registry).splitlines() if line.startswith(name + " ")]
    return float(lines[0].split()[1])


async def until(check, what: str) -> None:
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_anonymous_watch_streams_have_their_own_budget(server):
    options = ServerOptions(auth_table=table(), max_concurrent_rpcs=8, max_anonymous_streams=4)
    async with budget_server(server["models"], options) as (ch, registry):
        held, refusals = [], []
        for _ in range(20):
            try:
                held.append(await open_watch(ch))
            except grpc.aio.AioRpcError as err:
                refusals.append(refused(err, "ANONYMOUS_STREAMS_EXHAUSTED"))
        assert (len(held), len(refusals)) == (4, 16)
        assert refusals[0].metadata["limit"] == "4"
        stub = pb_grpc.InferenceServiceStub(ch)
        for _ in range(10):  # more calls than --max-concurrent-rpcs leaves, one after another
            assert (await stub.ListModels(pb.ListModelsRequest(), metadata=bearer("tok-ops"))).models
        out = await generate(stub, request("Hello", max_tokens=2), metadata=bearer("tok-alpha"))
        assert out.finished is not None and out.token_ids
        check = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""))
        assert check.status == health_pb2.HealthCheckResponse.SERVING  # probes always answer
        calls = (await stub.GetLoad(pb.GetLoadRequest(), metadata=bearer("tok-ops"))).calls
        assert (calls.anonymous_streams, calls.max_anonymous_streams, calls.refused_anonymous_streams) == (4, 4, 16)
        assert calls.max_concurrent_rpcs == 8 and calls.open_rpcs == 1  # this GetLoad only
        assert series(registry, "mlxgrpc_anonymous_streams") == 4
        for call in held:
            call.cancel()

        async def freed():
            return (await stub.GetLoad(pb.GetLoadRequest(), metadata=bearer("tok-ops"))).calls.anonymous_streams == 0
        await until(freed, "the cancelled Watch streams were given back")
        (await open_watch(ch)).cancel()


async def test_a_server_without_tokens_counts_watch_apart_from_generate(server):
    options = ServerOptions(max_concurrent_rpcs=2, max_anonymous_streams=2)
    async with budget_server(server["models"], options) as (ch, registry):
        watches = [await open_watch(ch), await open_watch(ch)]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await open_watch(ch)
        refused(err.value, "ANONYMOUS_STREAMS_EXHAUSTED")
        stub = pb_grpc.InferenceServiceStub(ch)
        streams = [await hold_generate(stub), await hold_generate(stub)]  # the two RPCs the server serves
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListModels(pb.ListModelsRequest())
        assert refused(err.value, "TOO_MANY_RPCS").metadata["limit"] == "2"
        check = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""))
        assert check.status == health_pb2.HealthCheckResponse.SERVING
        assert series(registry, "mlxgrpc_open_rpcs") == 2
        for call in streams + watches:
            call.cancel()

        async def served():
            with contextlib.suppress(grpc.aio.AioRpcError):
                return bool((await stub.ListModels(pb.ListModelsRequest())).models)
            return False
        await until(served, "the cancelled streams were given back")


async def test_a_tenant_beyond_its_max_streams_is_refused_alone(server):
    options = ServerOptions(auth_table=table(), max_streams_per_tenant=3)
    async with budget_server(server["models"], options) as (ch, registry):
        stub = pb_grpc.InferenceServiceStub(ch)
        held = [await hold_generate(stub, "tok-alpha"), await hold_generate(stub, "tok-alpha")]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await hold_generate(stub, "tok-alpha")
        info = refused(err.value, "TENANT_STREAMS_EXHAUSTED")
        assert (info.metadata["tenant"], info.metadata["limit"]) == ("alpha", "2")
        with pytest.raises(grpc.aio.AioRpcError) as err:  # every streaming call counts, the worker contract's too
            [c async for c in mlx_grpc.MlxEngineStub(ch).GetTokenizer(common_pb2.GetTokenizerRequest(),
                                                                      metadata=bearer("tok-alpha"))]
        refused(err.value, "TENANT_STREAMS_EXHAUSTED")
        assert (await stub.ListModels(pb.ListModelsRequest(), metadata=bearer("tok-alpha"))).models  # unary
        out = await generate(stub, request("Hello", max_tokens=2), metadata=bearer("tok-beta"))
        assert out.finished is not None and out.token_ids
        own = (await stub.GetLoad(pb.GetLoadRequest(), metadata=bearer("tok-alpha"))).calls
        assert [(t.tenant, t.open_streams, t.max_streams, t.refused_streams) for t in own.tenants] == [
            ("alpha", 2, 2, 2)]
        assert own.open_rpcs == 0 and own.anonymous_streams == 0  # server-wide counts: not for a tenant
        everyone = (await stub.GetLoad(pb.GetLoadRequest(), metadata=bearer("tok-ops"))).calls
        assert {t.tenant: (t.open_streams, t.max_streams) for t in everyone.tenants} == {
            "alpha": (2, 2), "beta": (0, 3), "ops": (0, 3)}
        assert everyone.open_rpcs == 3  # alpha's two streams and this GetLoad
        assert 'mlxgrpc_tenant_open_streams{tenant="alpha"} 2.0' in scrape(registry)
        assert 'mlxgrpc_refused_calls_total{limit="tenant_streams",tenant="alpha"} 2.0' in scrape(registry)
        for call in held:
            call.cancel()

        async def freed():
            load = await stub.GetLoad(pb.GetLoadRequest(), metadata=bearer("tok-alpha"))
            return load.calls.tenants[0].open_streams == 0
        await until(freed, "alpha's cancelled streams were given back")
        out = await generate(stub, request("Hello", max_tokens=2), metadata=bearer("tok-alpha"))
        assert out.finished is not None


async def test_a_priority_above_the_tenants_max_priority_is_invalid(server):
    async with budget_server(server["models"], ServerOptions(auth_table=table())) as (ch, registry):
        stub = pb_grpc.InferenceServiceStub(ch)
        too_high = [stub.Generate(request("Hello", max_tokens=2, priority=11), metadata=bearer("tok-beta")),
                    stub.Embed(pb.EmbedRequest(model=DECODER_EMBEDDER, inputs=["hi"], priority=11),
                               metadata=bearer("tok-beta"))]
        for call in too_high:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                [m async for m in call]
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            found = details(err.value)
            assert found["BadRequest"].field_violations[0].field == "priority"
            assert found["ErrorInfo"].reason == "PRIORITY_ABOVE_TENANT_MAX"
            assert found["ErrorInfo"].metadata["max_priority"] == "10"
        for token, priority in (("tok-beta", 10), ("tok-beta", -100), ("tok-alpha", 100)):
            out = await generate(stub, request("Hello", max_tokens=2, priority=priority), metadata=bearer(token))
            assert out.finished is not None
        own = (await stub.GetLoad(pb.GetLoadRequest(), metadata=bearer("tok-beta"))).calls
        assert [(t.tenant, t.max_priority, t.refused_priorities) for t in own.tenants] == [("beta", 10, 2)]
        assert 'mlxgrpc_tenant_max_priority{tenant="alpha"} 100.0' in scrape(registry)


@pytest.mark.parametrize("line, message", [
    ("t1 a inference max_streams=-1", "max_streams must be an integer >= 0"),
    ("t1 a inference max_streams=two", "max_streams must be an integer >= 0"),
    ("t1 a inference max_priority=101", "max_priority must be an integer from 0 to 100"),
    ("t1 a inference max_priority=-5", "max_priority must be an integer from 0 to 100"),
])
def test_bad_stream_and_priority_settings_name_their_line(line, message):
    with pytest.raises(ValueError, match=f"tokens:1: {message}"):
        parse_lines([(1, line)], "tokens")


def test_the_tokens_file_sets_max_streams_and_max_priority():
    tenants = table().tenants()
    assert (tenants["alpha"].max_streams, tenants["alpha"].max_priority) == (2, 100)
    assert (tenants["beta"].max_streams, tenants["beta"].max_priority) == (None, 10)  # None: the server's flag
