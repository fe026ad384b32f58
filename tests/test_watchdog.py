"""A broken engine is noticed: when its thread dies, or stalls past the stall timeout
with work pending, every caller waiting on it (streams, GetLoad, PlanMemory) is
answered UNAVAILABLE (ENGINE_DEAD), new requests are refused the same way, health
says NOT_SERVING, and ``serve`` exits with status 3. Each test breaks a dedicated
engine on a fixture model, never the session's."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from engine.embedding.engine import EmbeddingEngine
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.models import ModelSet
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.server import ServerOptions, create_server, guard_engines, serve, set_health
from service.watchdog import EXIT_ENGINE_BROKEN
from tests.helpers import details, generate, request
from tests.probe import probe
from tests.test_cancellation import read_until_delta
from tests.test_ops_drain import read_all

ANSWERED_S = 5.0  # generous: every caller must be answered well before this
CONFIG = GenerationConfig(scheduler=SchedulerConfig(max_active=4, max_queued=8, prefill_chunk=8, tick_tokens=24))


class Fault(BaseException):
    """Escapes every ``except Exception``: it kills the engine thread."""


def assert_engine_dead(err: BaseException) -> None:
    assert isinstance(err, grpc.aio.AioRpcError), err
    assert err.code() == grpc.StatusCode.UNAVAILABLE, err
    assert details(err)["ErrorInfo"].reason == "ENGINE_DEAD"


@contextlib.asynccontextmanager
async def guarded_server(models: ModelSet, stall_timeout_s: float):
    """A started server on ``models`` with the watchdog running, and its channel."""
    hs = health.aio.HealthServicer()
    srv, port = await create_server("127.0.0.1:0", models, health_servicer=hs)
    await srv.start()
    await models.start()
    await set_health(hs, True)
    guard = asyncio.create_task(guard_engines(models, hs, stall_timeout_s))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel, guard
    finally:
        guard.cancel()
        await srv.stop(0)
        await models.close()


def blocking(release: threading.Event, entered: threading.Event, then: BaseException | None = None):
    """An engine-thread call that blocks until ``release``, then raises ``then``."""
    def block(_scheduler):
        entered.set()
        release.wait(30)
        if then is not None:
            raise then
    return block


def die(_scheduler):
    raise Fault()


async def open_streams(stub, n: int) -> list:
    calls = [stub.Generate(request("Keep going", max_tokens=3000, request_id=f"open-{i}")) for i in range(n)]
    for call in calls:
        await read_until_delta(call)
    return calls


async def pending_calls(stub) -> list[asyncio.Task]:
    """GetLoad and PlanMemory, both waiting on the engine thread."""
    async def done(call):
        return await call
    return [asyncio.create_task(done(stub.GetLoad(pb.GetLoadRequest(model="llama")))),
            asyncio.create_task(done(stub.PlanMemory(pb.PlanMemoryRequest(model="llama", context_tokens=64))))]


async def answered(calls: list, others: list[asyncio.Task]) -> list:
    """What every stream and call ended with (all within ``ANSWERED_S``)."""
    streams = [asyncio.create_task(read_all(call)) for call in calls]
    await asyncio.wait_for(asyncio.gather(*streams, *others, return_exceptions=True), ANSWERED_S)
    return [s.result() for s in streams] + [o.exception() for o in others]


async def test_a_dead_engine_thread_answers_every_caller(fixture_models):
    engine = GenerationEngine(str(fixture_models["llama"]), name="llama", config=CONFIG)
    async with guarded_server(ModelSet([engine], []), stall_timeout_s=0) as (channel, guard):
        stub = pb_grpc.InferenceServiceStub(channel)
        calls = await open_streams(stub, 3)
        release, entered = threading.Event(), threading.Event()
        dying = probe(engine, blocking(release, entered, Fault()))
        await asyncio.to_thread(entered.wait, 30)
        others = await pending_calls(stub)
        await asyncio.sleep(0.2)  # they reach the engine thread's inbox
        release.set()  # the thread dies while all of them wait on it
        ends = await answered(calls, others)
        for _tokens, _finished, code, found in ends[:3]:
            assert code == grpc.StatusCode.UNAVAILABLE and found["ErrorInfo"].reason == "ENGINE_DEAD"
        for err in ends[3:]:
            assert_engine_dead(err)
        assert dying.exception(timeout=ANSWERED_S) is not None
        assert await asyncio.wait_for(guard, ANSWERED_S) == {"llama": "its engine thread died: Fault"}
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        try:
            await generate(stub, request("After", max_tokens=2))
        except grpc.aio.AioRpcError as err:
            assert_engine_dead(err)
        else:
            raise AssertionError("a broken engine served a new request")
        assert not engine.ready


async def test_a_stalled_engine_thread_answers_every_caller(fixture_models):
    engine = GenerationEngine(str(fixture_models["llama"]), name="llama", config=CONFIG)
    release, entered = threading.Event(), threading.Event()
    async with guarded_server(ModelSet([engine], []), stall_timeout_s=0.5) as (channel, guard):
        try:
            stub = pb_grpc.InferenceServiceStub(channel)
            calls = await open_streams(stub, 3)
            probe(engine, blocking(release, entered))  # stuck, with streams running
            await asyncio.to_thread(entered.wait, 30)
            others = await pending_calls(stub)
            ends = await answered(calls, others)
            for _tokens, _finished, code, found in ends[:3]:
                assert code == grpc.StatusCode.UNAVAILABLE and found["ErrorInfo"].reason == "ENGINE_DEAD"
            for err in ends[3:]:
                assert_engine_dead(err)
            broken = await asyncio.wait_for(guard, ANSWERED_S)
            assert "no progress" in broken["llama"]
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
            try:
                await asyncio.wait_for(stub.GetLoad(pb.GetLoadRequest(model="llama")), ANSWERED_S)
            except grpc.aio.AioRpcError as err:
                assert_engine_dead(err)
            else:
                raise AssertionError("a broken engine answered GetLoad")
        finally:
            release.set()


async def test_a_stalled_embedding_thread_answers_its_caller(fixture_models):
    engine = EmbeddingEngine(fixture_models["qwen3"], name="embedder")
    release = threading.Event()
    async with guarded_server(ModelSet([], [engine]), stall_timeout_s=0.5) as (channel, guard):
        try:
            stub = pb_grpc.InferenceServiceStub(channel)
            forward = engine.model._forward  # what the engine thread runs for every batch

            def stuck(*args, **kwargs):
                release.wait(30)
                return forward(*args, **kwargs)
            engine.model._forward = stuck
            call = asyncio.create_task(read_embed(stub.Embed(pb.EmbedRequest(model="embedder", inputs=["stuck"]))))
            await asyncio.wait([call], timeout=ANSWERED_S)
            assert call.done()
            assert_engine_dead(call.exception())
            assert "no progress" in (await asyncio.wait_for(guard, ANSWERED_S))["embedder"]
            assert not engine.ready
        finally:
            release.set()


async def test_a_dead_embedding_thread_answers_its_caller_and_refuses_the_next(fixture_models):
    engine = EmbeddingEngine(fixture_models["qwen3"], name="embedder")
    async with guarded_server(ModelSet([], [engine]), stall_timeout_s=0) as (channel, guard):
        stub = pb_grpc.InferenceServiceStub(channel)

        def dies(*args, **kwargs):
            raise Fault()
        engine.model._forward = dies
        call = asyncio.create_task(read_embed(stub.Embed(pb.EmbedRequest(model="embedder", inputs=["fatal"]))))
        await asyncio.wait([call], timeout=ANSWERED_S)
        assert call.done()
        assert_engine_dead(call.exception())
        assert "died: Fault" in (await asyncio.wait_for(guard, ANSWERED_S))["embedder"]
        assert not engine.ready
        try:
            await read_embed(stub.Embed(pb.EmbedRequest(model="embedder", inputs=["after"])))
        except grpc.aio.AioRpcError as err:
            assert err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND), err
        else:
            raise AssertionError("a dead embedding engine answered")


async def read_embed(call):
    return [reply async for reply in call]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_serve_exits_non_zero_when_an_engine_dies(fixture_models):
    engine = GenerationEngine(str(fixture_models["llama"]), name="llama", config=CONFIG)
    port = free_port()
    serving = asyncio.create_task(serve(f"127.0.0.1:{port}", ModelSet([engine], []),
                                        ServerOptions(grace_s=5.0, access_log=False)))
    for _ in range(3000):
        if engine.ready or serving.done():
            break
        await asyncio.sleep(0.01)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        calls = await open_streams(pb_grpc.InferenceServiceStub(channel), 1)
        probe(engine, die)
        ends = await answered(calls, [])
    assert ends[0][2] == grpc.StatusCode.UNAVAILABLE and ends[0][3]["ErrorInfo"].reason == "ENGINE_DEAD"
    assert await asyncio.wait_for(serving, 30) == EXIT_ENGINE_BROKEN


def test_the_stall_timeout_is_a_serve_flag():
    from service.cli import build_parser, server_options

    parser = build_parser()
    assert server_options(parser.parse_args(["serve"]), parser).engine_stall_timeout_s == 60.0
    args = parser.parse_args(["serve", "--engine-stall-timeout", "0"])
    assert server_options(args, parser).engine_stall_timeout_s == 0.0
