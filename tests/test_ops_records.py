"""What the server records about calls stays true and bounded whatever a client sends:
status codes (deadline, oversized replies), status details and trailers, access-log
lines and metric labels. Extra in-process servers over the session's models."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import grpc
import pytest

from service.access_log import ACCESS_LOGGER, AccessLog, JsonFormatter, TextFormatter
from service.calls import CallRecord
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.interceptors import ServerState
from service.metrics import Metrics, scrape
from service.server import ServerOptions, create_server
from tests.helpers import details, generate, request

SERVICE = "mlxgrpc.v1.InferenceService"
HOSTILE = "evil\x1b[2J\r\nINFO fake line\u202e\x00\x7f\x85\u2028"


@contextlib.asynccontextmanager
async def recorded_server(models, options: ServerOptions = ServerOptions()):
    metrics = Metrics(models)
    srv, port = await create_server("127.0.0.1:0", models, options=options, metrics=metrics, state=ServerState())
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            yield ch, metrics
    finally:
        await srv.stop(0.5)


def access_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == ACCESS_LOGGER and getattr(r, "fields", None)]


def series(metrics: Metrics, name: str) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value for family in metrics.registry.collect()
            for s in family.samples if s.name == name}


async def test_deadline_expiry_is_recorded_as_deadline_exceeded(server, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with recorded_server(server["models"]) as (ch, metrics):
        stub = pb_grpc.InferenceServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await generate(stub, request("A long story", max_tokens=3000, request_id="late-1"), timeout=0.5)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        call = stub.Generate(request("Another long story", max_tokens=3000, request_id="dropped-1"))
        await call.read()
        call.cancel()
        for _ in range(100):  # the server learns of both a moment later
            codes = {r.fields["request_id"]: r.fields["code"] for r in access_lines(caplog)}
            if len(codes) == 2:
                break
            await asyncio.sleep(0.05)
        assert codes == {"late-1": "DEADLINE_EXCEEDED", "dropped-1": "CANCELLED"}
        counted = series(metrics, "mlxgrpc_requests_total")
        assert counted[(("code", "DEADLINE_EXCEEDED"), ("method", "Generate"), ("service", SERVICE))] == 1
        assert counted[(("code", "CANCELLED"), ("method", "Generate"), ("service", SERVICE))] == 1


async def test_a_reply_over_the_send_limit_fails_clearly_and_is_recorded_so(server, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with recorded_server(server["models"], ServerOptions(max_message_bytes=4096)) as (ch, metrics):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pb_grpc.InferenceServiceStub(ch).Tokenize(pb.TokenizeRequest(model="llama", text="a b " * 900))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert details(err.value)["ErrorInfo"].reason == "RESPONSE_TOO_LARGE"
        await asyncio.sleep(0.1)
    assert [r.fields["code"] for r in access_lines(caplog)] == ["RESOURCE_EXHAUSTED"]


async def test_oversized_client_strings_are_refused_and_never_echoed_whole(server, caplog):
    """A 1 MB model name or id is INVALID_ARGUMENT (not a trailer too large to send),
    and neither the status nor the access log repeats it whole."""
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    huge = "m" * (1 << 20)
    async with recorded_server(server["models"]) as (ch, _):
        stub = pb_grpc.InferenceServiceStub(ch)
        calls = [lambda: generate(stub, request("Hi", model=huge)),
                 lambda: generate(stub, request("Hi", request_id=huge)),
                 lambda: generate(stub, request("Hi", session_id=huge)),
                 lambda: stub.Cancel(pb.CancelRequest(request_id=huge)),
                 lambda: stub.Tokenize(pb.TokenizeRequest(model=huge, text="hi")),
                 lambda: stub.GetModelInfo(pb.GetModelInfoRequest(model=huge))]
        for call in calls:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call()
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
            assert len(err.value.details()) < 300
            trailers = sum(len(k) + len(v) for k, v in err.value.trailing_metadata())
            assert trailers < 2000
        with pytest.raises(grpc.aio.AioRpcError) as err:  # at the limit: looked up, echoed cut short
            await generate(stub, request("Hi", model="n" * 128))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND and "(128 characters)" in err.value.details()
        await asyncio.sleep(0.1)
    lines = access_lines(caplog)
    assert len(lines) == len(calls) + 1
    assert all(len(r.getMessage()) < 1200 for r in lines)


async def test_control_characters_never_reach_a_log_line_raw(server, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with recorded_server(server["models"]) as (ch, _):
        await generate(pb_grpc.InferenceServiceStub(ch), request("Hi", max_tokens=1, request_id=HOSTILE))
        await asyncio.sleep(0.1)
    [line] = [r for r in access_lines(caplog) if r.fields["request_id"] == HOSTILE]
    for text in (line.getMessage(), TextFormatter().format(line), JsonFormatter().format(line)):
        assert text.isprintable(), repr(text)
    assert json.loads(JsonFormatter().format(line))["request_id"] == HOSTILE  # escaped, not lost


def test_every_log_line_escapes_what_is_not_printable():
    record = logging.LogRecord("engine.x", logging.ERROR, __file__, 1, "request %s failed", (HOSTILE,), None)
    for formatter in (TextFormatter("%(levelname)s %(message)s"), JsonFormatter()):
        assert formatter.format(record).isprintable()
    call = CallRecord("/x/" + HOSTILE, request_id="r" * 5000)
    records: list[logging.LogRecord] = []
    logger = logging.getLogger("tests.records")
    logger.propagate, logger.level = False, logging.INFO
    logger.handlers = [type("Keep", (logging.Handler,), {"emit": lambda self, r: records.append(r)})()]
    AccessLog(logger).on_end(call)
    assert records[0].getMessage().isprintable() and len(records[0].getMessage()) < 700


async def test_metric_labels_do_not_grow_with_what_clients_send(server):
    """Unknown methods (unauthenticated too) share one `unknown` label; so do model
    names no model has; an unnamed model is the default it resolves to. Adapter names
    that are not loaded never become labels; the adapter RPCs have labels of their own."""
    options = ServerOptions(auth_tokens=("tok",))
    async with recorded_server(server["models"], options) as (ch, metrics):
        for i in range(200):
            method = ch.unary_unary(f"/evil.Service{i}/M{i}", request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
            with pytest.raises(grpc.aio.AioRpcError):
                await method(b"")
        stub = pb_grpc.InferenceServiceStub(ch)
        auth = (("authorization", "Bearer tok"),)
        for i in range(20):
            with pytest.raises(grpc.aio.AioRpcError):
                await generate(stub, request("Hi", model=f"no-such-{i}"), metadata=auth)
            with pytest.raises(grpc.aio.AioRpcError):
                await generate(stub, request("Hi", adapter=f"no-such-adapter-{i}"), metadata=auth)
        assert (await stub.ListAdapters(pb.ListAdaptersRequest(), metadata=auth)).max_adapters > 0
        replies = [r async for r in stub.Embed(pb.EmbedRequest(inputs=["hello"]), metadata=auth)]
        assert len(replies) == 1
        await asyncio.sleep(0.1)
        text = scrape(metrics.registry)
    counted = series(metrics, "mlxgrpc_requests_total")
    assert counted[(("code", "UNAUTHENTICATED"), ("method", "unknown"), ("service", "unknown"))] == 200
    assert "evil" not in text and "no-such" not in text
    assert counted[(("code", "OK"), ("method", "ListAdapters"), ("service", SERVICE))] == 1
    assert len(counted) <= 5  # as before, plus ListAdapters
    embedded = series(metrics, "mlxgrpc_embedded_tokens_total")
    assert list(embedded) == [(("model", server["models"].embedding[0].name),)]
