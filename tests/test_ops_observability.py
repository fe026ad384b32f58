"""Prometheus metrics over HTTP and the structured access log, on extra in-process
servers over the session's loaded models (each with its own registry)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.access_log import ACCESS_LOGGER, AccessLog, FloodWindows, JsonFormatter, access_fields
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.interceptors import CallRecord, ServerState
from service.metrics import Metrics
from service.server import ServerOptions, create_server
from tests.helpers import generate, request

SERVICE = "mlxgrpc.v1.InferenceService"


@contextlib.asynccontextmanager
async def metered_server(models, options: ServerOptions = ServerOptions(), *, state: ServerState | None = None,
                         stub=pb_grpc.InferenceServiceStub):
    metrics = Metrics(models)
    srv, port = await create_server("127.0.0.1:0", models, options=options, metrics=metrics,
                                    state=state or ServerState())
    await srv.start()
    http_port = metrics.serve_http(0, "127.0.0.1")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            yield stub(ch), http_port
    finally:
        await srv.stop(0.5)
        metrics.close()


async def scrape(http_port: int) -> dict[tuple[str, tuple], float]:
    """Every sample of the /metrics page, by (name, sorted labels)."""
    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as reply:
            assert reply.status == 200
            return reply.read().decode()

    text = await asyncio.to_thread(get)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def rpc(method: str, code: str | None = None) -> dict[str, str]:
    return {"service": SERVICE, "method": method, **({"code": code} if code else {})}


async def test_metrics_count_rpcs_tokens_and_latencies(server):
    async with metered_server(server["models"]) as (stub, http_port):
        streams = [await generate(stub, request("Hello there, metrics", max_tokens=6)) for _ in range(2)]
        with pytest.raises(grpc.aio.AioRpcError):
            await generate(stub, request("Hello", sampling=gen_pb.SamplingParams(top_p=2)))
        await stub.Tokenize(pb.TokenizeRequest(model="llama", text="abc"))
        await asyncio.sleep(0.2)  # the last call's bookkeeping runs just after its status left
        m = await scrape(http_port)

    assert value(m, "mlxgrpc_requests_total", **rpc("Generate", "OK")) == 2
    assert value(m, "mlxgrpc_requests_total", **rpc("Generate", "INVALID_ARGUMENT")) == 1
    assert value(m, "mlxgrpc_requests_total", **rpc("Tokenize", "OK")) == 1
    assert value(m, "mlxgrpc_request_duration_seconds_count", **rpc("Generate")) == 3
    assert value(m, "mlxgrpc_requests_in_flight", **rpc("Generate")) == 0

    tokens = sum(len(s.token_ids) for s in streams)
    assert tokens == 12
    assert value(m, "mlxgrpc_generated_tokens_total", model="llama") == tokens
    assert value(m, "mlxgrpc_prompt_tokens_total", model="llama") == sum(s.started.prompt_tokens for s in streams)
    assert value(m, "mlxgrpc_prefix_cache_hit_tokens_total", model="llama") == sum(
        s.started.cached_tokens for s in streams)
    assert value(m, "mlxgrpc_time_to_first_token_seconds_count", model="llama") == 2
    first_delta_tokens = sum(len(next(d for d in s.deltas if d.token_ids).token_ids) for s in streams)
    assert value(m, "mlxgrpc_inter_token_latency_seconds_count", model="llama") == tokens - first_delta_tokens
    assert value(m, "mlxgrpc_time_to_first_token_seconds_sum", model="llama") > 0
    assert value(m, "mlxgrpc_model_ready", model="llama") == 1
    assert ("mlxgrpc_queue_depth", (("model", "llama"),)) in m
    assert value(m, "mlxgrpc_draining") == 0


async def test_metrics_count_speculative_drafts(server):
    from tests.conftest import SELF_DRAFTED

    spec = gen_pb.SpeculationOptions(mode=gen_pb.SPECULATION_MODE_DRAFT, num_draft_tokens=4)
    async with metered_server(server["models"]) as (stub, http_port):
        out = await generate(stub, request("Hello there, drafts", model=SELF_DRAFTED, max_tokens=16,
                                           speculation=spec))
        await asyncio.sleep(0.2)
        m = await scrape(http_port)
    usage = out.finished.usage
    assert usage.draft_tokens > 0
    assert value(m, "mlxgrpc_draft_tokens_total", model=SELF_DRAFTED) == usage.draft_tokens
    assert value(m, "mlxgrpc_accepted_draft_tokens_total", model=SELF_DRAFTED) == usage.accepted_draft_tokens


async def test_metrics_show_in_flight_streams_and_registries_are_separate(server):
    async with metered_server(server["models"]) as (stub, http_port), \
            metered_server(server["models"]) as (_, other_port):
        call = stub.Generate(request("Tell me a long story", max_tokens=400, request_id="metrics-long"))
        first = await call.read()
        assert first.WhichOneof("event") == "started"
        await call.read()  # a token arrived
        m = await scrape(http_port)
        assert value(m, "mlxgrpc_requests_in_flight", **rpc("Generate")) == 1
        assert value(m, "mlxgrpc_active_rows", model="llama") >= 1
        assert value(m, "mlxgrpc_time_to_first_token_seconds_count", model="llama") == 1
        call.cancel()
        for _ in range(100):  # the server sees the cancel a moment later
            m = await scrape(http_port)
            if value(m, "mlxgrpc_requests_total", **rpc("Generate", "CANCELLED")) == 1:
                break
            await asyncio.sleep(0.05)
        assert value(m, "mlxgrpc_requests_total", **rpc("Generate", "CANCELLED")) == 1
        assert value(m, "mlxgrpc_requests_in_flight", **rpc("Generate")) == 0
        other = await scrape(other_port)
        assert value(other, "mlxgrpc_requests_total", **rpc("Generate", "CANCELLED")) == 0
        assert value(other, "mlxgrpc_time_to_first_token_seconds_count", model="llama") == 0


async def test_access_log_has_one_line_per_rpc(server, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with metered_server(server["models"]) as (stub, _):
        out = await generate(stub, request("Hello access log", max_tokens=4, request_id="access-1"))
        with pytest.raises(grpc.aio.AioRpcError):
            await generate(stub, request("Hello", request_id="access-2", stopping=gen_pb.StoppingCriteria(max_tokens=0)))
        await stub.ListModels(pb.ListModelsRequest())
        await asyncio.sleep(0.2)
    lines = [r for r in caplog.records if r.name == ACCESS_LOGGER and getattr(r, "fields", None)]
    by_id = {r.fields["request_id"]: r for r in lines if r.fields["request_id"].startswith("access-")}
    assert set(by_id) == {"access-1", "access-2"}
    ok = by_id["access-1"].fields
    assert ok["method"] == f"/{SERVICE}/Generate" and ok["code"] == "OK" and ok["model"] == "llama"
    assert ok["peer"].startswith(("ipv4:", "ipv6:")) and ok["duration_ms"] > 0
    assert ok["completion_tokens"] == 4 and ok["prompt_tokens"] == out.started.prompt_tokens
    assert ok["finish_reason"] == "length" and ok["ttft_ms"] > 0
    assert "code=OK" in by_id["access-1"].getMessage() and "request_id=access-1" in by_id["access-1"].getMessage()
    assert by_id["access-2"].fields["code"] == "INVALID_ARGUMENT"
    assert any(r.fields["method"] == f"/{SERVICE}/ListModels" and r.fields["code"] == "OK" for r in lines)


def test_json_log_lines_carry_the_access_fields():
    call = CallRecord("/mlxgrpc.v1.InferenceService/Generate", peer="ipv4:10.0.0.1:5000", request_id='r "1"',
                      model="llama", code="OK", duration_s=0.25, prompt_tokens=5, completion_tokens=7,
                      cached_tokens=0)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("tests.access.json")
    logger.propagate, logger.level = False, logging.INFO
    logger.addHandler(Keep())
    AccessLog(logger).on_end(call)
    line = JsonFormatter().format(records[0])
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["logger"] == "tests.access.json" and entry["level"] == "INFO"
    assert entry["ts"].endswith("Z")
    assert {k: entry[k] for k in access_fields(call)} == access_fields(call)
    assert entry["duration_ms"] == 250.0 and entry["completion_tokens"] == 7
    assert 'request_id="r \\"1\\""' in entry["message"]  # quoted in the text form
    try:
        raise ValueError("boom")
    except ValueError:
        err = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %s", ("here",), __import__("sys").exc_info())
    entry = json.loads(JsonFormatter().format(err))
    assert entry["message"] == "failed here" and "ValueError: boom" in entry["exception"]


def test_a_flood_of_refusals_is_sampled_and_counted_in_the_access_log():
    """Refused calls in a flood take one line per second for each method, code and tenant;
    the next line counts the ones left out. Every other call keeps its line."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("tests.access.flood")
    logger.propagate, logger.level = False, logging.INFO
    logger.addHandler(Keep())
    log = AccessLog(logger)
    watch = "/grpc.health.v1.Health/Watch"
    for _ in range(500):
        log.on_end(CallRecord(watch, code="RESOURCE_EXHAUSTED"))
        log.on_end(CallRecord("/mlxgrpc.v1.InferenceService/ListModels", code="UNAUTHENTICATED"))
        log.on_end(CallRecord("/mlxgrpc.v1.InferenceService/GetLoad", tenant="acme", code="OK"))
    by_method = {}
    for record in records:
        by_method.setdefault(record.fields["method"], []).append(record.fields)
    assert len(by_method["/mlxgrpc.v1.InferenceService/GetLoad"]) == 500
    assert len(by_method[watch]) == 1 and "suppressed" not in by_method[watch][0]
    assert len(by_method["/mlxgrpc.v1.InferenceService/ListModels"]) == 1
    log.floods.window_s = 0.0  # the window is over: the next refusal is logged with the count
    log.on_end(CallRecord(watch, code="RESOURCE_EXHAUSTED"))
    assert records[-1].fields["method"] == watch and records[-1].fields["suppressed"] == 499
    assert "suppressed=499" in records[-1].getMessage()


def test_flood_windows_keep_a_bounded_number_of_keys():
    windows = FloodWindows(window_s=10.0, max_keys=4)
    assert [windows.admit((f"/m{i}",), 0.0) for i in range(8)] == [0] * 8
    assert windows.admit(("/m7",), 1.0) is None  # still in its window
    assert windows.admit(("/m0",), 1.0) == 0  # forgotten (the oldest went first): logged again
