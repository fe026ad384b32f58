"""Graceful drain: health NOT_SERVING, new RPCs UNAVAILABLE + RetryInfo, in-flight
streams finish within the grace period; and a real ``mlx-grpc serve`` process that
gets SIGTERM exits 0."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.access_log import ACCESS_LOGGER
from service.interceptors import ServerState
from service.metrics import Metrics, scrape
from service.server import create_server, drain, set_health
from tests.helpers import details, generate, request

REPO = Path(__file__).resolve().parents[1]
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def read_all(call):
    """The rest of a Generate stream: (token count, finished event or None, status code,
    google.rpc details of a failure)."""
    tokens, finished = 0, None
    try:
        while (msg := await call.read()) is not grpc.aio.EOF:
            if msg.WhichOneof("event") == "delta":
                tokens += len(msg.delta.token_ids)
            elif msg.WhichOneof("event") == "finished":
                finished = msg.finished
        return tokens, finished, grpc.StatusCode.OK, {}
    except grpc.aio.AioRpcError as err:
        return tokens, finished, err.code(), details(err)


async def health_status(channel) -> int:
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return reply.status


def assert_draining_rejection(err: grpc.aio.AioRpcError) -> None:
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    found = details(err)
    assert found["ErrorInfo"].reason == "DRAINING" and found["ErrorInfo"].domain == "mlxgrpc.v1"
    assert found["RetryInfo"].retry_delay.ToMilliseconds() > 0


@contextlib.asynccontextmanager
async def drainable_server(models):
    state, hs, metrics = ServerState(), health.aio.HealthServicer(), Metrics(models)
    srv, port = await create_server("127.0.0.1:0", models, health_servicer=hs, state=state, metrics=metrics)
    await set_health(hs, True)
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            yield srv, state, hs, metrics, ch
    finally:
        await srv.stop(0)


async def test_drain_lets_in_flight_streams_finish(server):
    async with drainable_server(server["models"]) as (srv, state, hs, metrics, ch):
        stub = pb_grpc.InferenceServiceStub(ch)
        watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest())
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        call = stub.Generate(request("Drain me gently", max_tokens=120))
        assert (await call.read()).WhichOneof("event") == "started"
        draining = asyncio.create_task(drain(srv, state, hs, 60.0, metrics=metrics))
        assert (await asyncio.wait_for(watch.read(), 10)).status == NOT_SERVING  # probes learn at once
        assert state.draining
        assert await health_status(ch) == NOT_SERVING
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await generate(stub, request("too late", max_tokens=2))
        assert_draining_rejection(err.value)
        assert metrics.registry.get_sample_value("mlxgrpc_draining") == 1
        tokens, finished, code, _ = await read_all(call)
        assert code == grpc.StatusCode.OK and finished.reason == gen_pb.FINISH_REASON_LENGTH
        assert finished.usage.completion_tokens == 120
        assert await asyncio.wait_for(draining, 30) is True


async def test_grace_over_ends_what_is_left_unavailable(server, stub, caplog):
    """Streams still running when the grace period ends (a second signal here) end
    with UNAVAILABLE, reason DRAINING and RetryInfo: the work was lost, another
    replica can do it. The access log says the same; the engine lets the rows go."""
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with drainable_server(server["models"]) as (srv, state, hs, metrics, ch):
        calls = [pb_grpc.InferenceServiceStub(ch).Generate(request("A very long story", max_tokens=3000,
                                                                   request_id=f"drain-cut-{i}"))
                 for i in range(3)]
        for call in calls:
            assert (await call.read()).WhichOneof("event") == "started"
        force = asyncio.Event()
        began = time.monotonic()
        asyncio.get_running_loop().call_later(0.3, force.set)  # a second SIGTERM
        assert await drain(srv, state, hs, 60.0, force=force) is False
        assert time.monotonic() - began < 10
        for call in calls:
            tokens, finished, code, found = await read_all(call)
            assert finished is None and code == grpc.StatusCode.UNAVAILABLE
            assert found["ErrorInfo"].reason == "DRAINING" and found["RetryInfo"].retry_delay.ToMilliseconds() > 0
        assert state.in_flight == 0
        await asyncio.sleep(0.1)
        cut = 'mlxgrpc_requests_total{code="UNAVAILABLE",method="Generate",service="mlxgrpc.v1.InferenceService"}'
        assert f"{cut} 3.0" in scrape(metrics.registry)
    logged = {r.fields["request_id"]: r.fields["code"] for r in caplog.records
              if r.name == ACCESS_LOGGER and str(getattr(r, "fields", {}).get("request_id", "")).startswith("drain-cut")}
    assert logged == {f"drain-cut-{i}": "UNAVAILABLE" for i in range(3)}
    # the engine let the rows go: the shared models still serve, and the ids are free again
    out = await generate(stub, request("after the cut", max_tokens=3, request_id="drain-cut-0"))
    assert len(out.token_ids) == 3


async def test_sigterm_drains_and_exits_zero(fixture_models):
    """A real server process: SIGTERM mid-stream -> NOT_SERVING, new RPCs UNAVAILABLE
    with RetryInfo, the stream still ends with its finished event, exit status 0."""
    cmd = [sys.executable, "-m", "service", "--log-format", "json", "serve",
           "--model", f"llama={fixture_models['llama']}", "--no-embedding",
           "--host", "127.0.0.1", "--port", "0", "--grace", "60"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    lines: list[str] = []
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def pump():
        port = None
        async for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            lines.append(line)
            try:
                message = json.loads(line)["message"]
            except (ValueError, KeyError, TypeError):
                continue
            if message.startswith("listening on port "):
                port = int(message.split()[3].rstrip(";"))
            if message.startswith("ready:") and not ready.done():
                ready.set_result(port)
        if not ready.done():
            ready.set_exception(RuntimeError("server exited early:\n" + "\n".join(lines[-30:])))

    pumping = asyncio.create_task(pump())
    try:
        port = await asyncio.wait_for(ready, 180)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.InferenceServiceStub(ch)
            assert await health_status(ch) == health_pb2.HealthCheckResponse.SERVING
            # ~600 tokens: seconds on the fixture model, well inside the 60 s grace
            call = stub.Generate(request("Once upon a time", max_tokens=600, request_id="in-flight"))
            assert (await call.read()).WhichOneof("event") == "started"
            assert (await call.read()).WhichOneof("event") == "delta"
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            for _ in range(500):
                if await health_status(ch) == NOT_SERVING:
                    break
                await asyncio.sleep(0.01)
            assert await health_status(ch) == NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await generate(stub, request("new work", max_tokens=2, request_id="rejected"))
            assert_draining_rejection(err.value)
            tokens, finished, code, _ = await read_all(call)
            assert code == grpc.StatusCode.OK and finished is not None
            assert finished.reason == gen_pb.FINISH_REASON_LENGTH and finished.usage.completion_tokens == 600
        assert await asyncio.wait_for(proc.wait(), 90) == 0
        exited = time.monotonic() - sent
        await pumping
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    messages = [e["message"] for e in entries]
    assert any(m.startswith("drained in ") for m in messages), messages
    assert messages[-1] == "stopped"
    access = {e.get("request_id"): e for e in entries if e["logger"] == "service.access"}
    assert access["in-flight"]["code"] == "OK" and access["in-flight"]["completion_tokens"] == 600
    assert access["rejected"]["code"] == "UNAVAILABLE"
    print(f"SIGTERM -> exit 0 in {exited:.2f}s; {[m for m in messages if m.startswith('drain')]}")
