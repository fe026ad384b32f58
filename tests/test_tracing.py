"""OpenTelemetry tracing (service/tracing.py): an extra in-process server over the session's
models, tracing into the SDK's InMemorySpanExporter; the caller's W3C trace context from the
metadata, the RPC span's attributes, its queue/prefill/decode children; off by default."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
from smg_grpc_proto import mlx_engine_pb2_grpc as mlx_grpc

from service import cli, tracing
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.server import ServerOptions, create_server
from tests.helpers import generate, request

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
GENERATE = "mlxgrpc.v1.InferenceService/Generate"
WORKER_GENERATE = "mlx.grpc.engine.MlxEngine/Generate"


@pytest.fixture
def no_otel_env(monkeypatch):
    for name in (*tracing.ENDPOINT_VARS, "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)


@contextlib.asynccontextmanager
async def traced_server(models, options: ServerOptions | None = None):
    """A server over ``models`` tracing into an in-memory exporter; yields (channel, exporter)."""
    exporter = InMemorySpanExporter()
    provider = tracing.new_provider(SimpleSpanProcessor(exporter))
    options = options or ServerOptions(tracer_provider=provider)
    srv, port = await create_server("127.0.0.1:0", models, options=options)
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel, exporter
    finally:
        await srv.stop(0.5)
        provider.shutdown()


async def rpc_spans(exporter: InMemorySpanExporter, count: int, timeout_s: float = 5.0) -> list:
    """The first ``count`` server spans (a span ends just after its status left)."""
    for _ in range(int(timeout_s / 0.02)):
        servers = [s for s in exporter.get_finished_spans() if s.kind is trace.SpanKind.SERVER]
        if len(servers) >= count:
            return servers
        await asyncio.sleep(0.02)
    raise AssertionError(f"{len(servers)} server spans, expected {count}")


def children(exporter: InMemorySpanExporter, span) -> list:
    found = [s for s in exporter.get_finished_spans()
             if s.parent is not None and s.parent.span_id == span.context.span_id]
    return sorted(found, key=lambda s: s.start_time)


def check_phases(exporter: InMemorySpanExporter, span) -> list:
    """queue, prefill and decode: in order, back to back, inside the RPC's span."""
    parts = children(exporter, span)
    assert [s.name for s in parts] == ["queue", "prefill", "decode"]
    for part in parts:
        assert part.context.trace_id == span.context.trace_id
        assert span.start_time <= part.start_time <= part.end_time <= span.end_time
    assert parts[0].end_time == parts[1].start_time and parts[1].end_time == parts[2].start_time
    return parts


async def test_generate_continues_the_callers_trace_with_its_phases(server, no_otel_env):
    async with traced_server(server["models"]) as (channel, exporter):
        stub = pb_grpc.InferenceServiceStub(channel)
        out = await generate(stub, request("Trace this generation", max_tokens=6, request_id="traced-1"),
                             metadata=(("traceparent", TRACEPARENT), ("tracestate", "smg=1")))
        [span] = await rpc_spans(exporter, 1)

    assert span.name == GENERATE
    assert span.context.trace_id == int(TRACE_ID, 16)
    assert span.parent is not None and span.parent.is_remote and span.parent.span_id == int(PARENT_ID, 16)
    assert span.context.trace_state.get("smg") == "1"
    assert span.resource.attributes["service.name"] == "mlx-grpc"
    usage = out.finished.usage
    assert dict(span.attributes) == {
        "rpc.system": "grpc", "rpc.service": "mlxgrpc.v1.InferenceService", "rpc.method": "Generate",
        "rpc.grpc.status_code": 0, "mlxgrpc.status": "OK", "gen_ai.request.model": "llama",
        "mlxgrpc.request_id": "traced-1", "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": 6, "mlxgrpc.cached_tokens": usage.cached_tokens,
        "mlxgrpc.finish_reason": "length", "gen_ai.response.finish_reasons": ("length",)}
    assert span.status.status_code is trace.StatusCode.UNSET

    queue, prefill, decode = check_phases(exporter, span)
    t = out.finished.timings
    seconds = [(s.end_time - s.start_time) / 1e9 for s in (queue, prefill, decode)]
    assert seconds == pytest.approx([t.queue_seconds, t.time_to_first_token_seconds - t.queue_seconds,
                                     t.total_seconds - t.time_to_first_token_seconds], abs=1e-5)


async def test_the_worker_contracts_generate_is_traced_too(server):
    async with traced_server(server["models"]) as (channel, exporter):
        worker = mlx_grpc.MlxEngineStub(channel)
        req = mlx_pb.GenerateRequest(request_id="worker-traced", text="Trace the worker", stream=True,
                                     sampling_params=mlx_pb.SamplingParams(temperature=0.0, max_tokens=5))
        replies = [r async for r in worker.Generate(req, metadata=(("traceparent", TRACEPARENT),))]
        [span] = await rpc_spans(exporter, 1)

    complete = replies[-1].complete
    assert span.name == WORKER_GENERATE and span.kind is trace.SpanKind.SERVER
    assert span.context.trace_id == int(TRACE_ID, 16) and span.parent.span_id == int(PARENT_ID, 16)
    a = span.attributes
    assert (a["rpc.service"], a["rpc.method"], a["rpc.grpc.status_code"]) == ("mlx.grpc.engine.MlxEngine",
                                                                             "Generate", 0)
    assert (a["gen_ai.request.model"], a["mlxgrpc.request_id"]) == ("llama", "worker-traced")
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"], a["mlxgrpc.cached_tokens"]) == (
        complete.prompt_tokens, 5, complete.cached_tokens)
    assert a["mlxgrpc.finish_reason"] == complete.finish_reason == "length"
    check_phases(exporter, span)


async def test_a_call_without_traceparent_starts_a_trace_and_errors_are_recorded(server):
    async with traced_server(server["models"]) as (channel, exporter):
        stub = pb_grpc.InferenceServiceStub(channel)
        await generate(stub, request("No parent here", max_tokens=2))
        await generate(stub, request("Nor here", max_tokens=2))
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await generate(stub, request("Hello", sampling=gen_pb.SamplingParams(top_p=2)),
                           metadata=(("traceparent", TRACEPARENT),))
        await stub.Tokenize(pb.TokenizeRequest(model="llama", text="not traced"))
        spans = await rpc_spans(exporter, 3)
        await asyncio.sleep(0.1)
        assert len([s for s in exporter.get_finished_spans() if s.kind is trace.SpanKind.SERVER]) == 3

    first, second, refused = spans
    assert first.parent is None and second.parent is None  # roots of new traces
    assert first.context.trace_id not in (second.context.trace_id, int(TRACE_ID, 16))
    check_phases(exporter, first)
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert refused.context.trace_id == int(TRACE_ID, 16)
    assert refused.attributes["rpc.grpc.status_code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert refused.attributes["mlxgrpc.status"] == "INVALID_ARGUMENT"
    assert refused.status.status_code is trace.StatusCode.UNSET  # the caller's mistake, not the server's
    assert children(exporter, refused) == []
    assert all(s.name in (GENERATE, "queue", "prefill", "decode") for s in exporter.get_finished_spans())


async def test_tracing_is_off_by_default_and_adds_nothing(server, no_otel_env, monkeypatch):
    assert tracing.endpoint(ServerOptions()) is None
    assert tracing.configured(ServerOptions()).tracer_provider is None and tracing.interceptors(ServerOptions()) == []

    def forbidden(*args, **kwargs):
        raise AssertionError("a tracing interceptor was made with tracing off")

    monkeypatch.setattr(tracing, "TracingInterceptor", forbidden)
    srv, port = await create_server("127.0.0.1:0", server["models"])
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            out = await generate(pb_grpc.InferenceServiceStub(channel), request("untraced", max_tokens=2),
                                 metadata=(("traceparent", TRACEPARENT),))
        assert len(out.token_ids) == 2
    finally:
        await srv.stop(0.5)
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)  # no global provider either


def test_the_endpoint_comes_from_the_flag_or_the_standard_variables(no_otel_env, monkeypatch):
    parser = cli.build_parser()
    args = parser.parse_args(["serve", "--otlp-endpoint", "http://collector:4317"])
    options = cli.server_options(args, parser)
    assert options.otlp_endpoint == "http://collector:4317" == tracing.endpoint(options)

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    assert tracing.endpoint(ServerOptions()) == "http://127.0.0.1:9"
    traced = tracing.configured(ServerOptions())
    try:
        assert isinstance(traced.tracer_provider, TracerProvider)
        assert traced.tracer_provider.resource.attributes["service.name"] == "mlx-grpc"
    finally:
        tracing.shutdown(traced)  # nothing was exported
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracing.endpoint(ServerOptions(otlp_endpoint="http://collector:4317")) is None


def test_configured_tracing_without_the_packages_refuses_to_start(no_otel_env, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)  # as if not installed
    assert tracing.check(ServerOptions()) == ""
    problem = tracing.check(ServerOptions(otlp_endpoint="http://collector:4317"))
    assert "mlx-grpc[tracing]" in problem
    with pytest.raises(tracing.TracingUnavailable):
        tracing.configured(ServerOptions(otlp_endpoint="http://collector:4317"))
    parser = cli.build_parser()
    with pytest.raises(SystemExit):
        cli.server_options(parser.parse_args(["serve", "--otlp-endpoint", "http://collector:4317"]), parser)
    assert "refusing to start" in capsys.readouterr().err


def test_the_server_starts_without_opentelemetry_installed():
    script = ("import sys; sys.modules['opentelemetry'] = None\n"
              "from service import cli, tracing\n"
              "from service.server import ServerOptions\n"
              "parser = cli.build_parser()\n"
              "options = cli.server_options(parser.parse_args(['serve']), parser)\n"
              "assert tracing.interceptors(options) == []\n"
              "assert not [m for m in sys.modules if m.startswith('opentelemetry') and sys.modules[m]]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
