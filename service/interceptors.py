"""Server interceptors: per-RPC observation (in-flight count, metrics, access log),
drain rejection, and the plumbing to wrap or replace a method handler.

Order on the server (outermost first): ``ObservingInterceptor`` sees every RPC,
rejected ones included, so each gets one access-log line and one count;
``AuthInterceptor`` (service/auth.py) and ``DrainInterceptor`` may replace the
handler with one that ends the call with a rich status without reading the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import grpc
from grpc_health.v1 import health

from .gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from .status import status_of

HEALTH_SERVICE = health.SERVICE_NAME  # grpc.health.v1.Health
GENERATE = "/mlxgrpc.v1.InferenceService/Generate"
EMBED = "/mlxgrpc.v1.InferenceService/Embed"

_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def split_method(full: str) -> tuple[str, str]:
    """'/pkg.Service/Method' -> ('pkg.Service', 'Method')."""
    service, _, method = full.lstrip("/").rpartition("/")
    return service, method


def _behavior(handler: grpc.RpcMethodHandler) -> Callable:
    return handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream


def rejecting(handler: grpc.RpcMethodHandler | None, status: grpc.Status, *,
              parse: bool = False) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that ends every call with ``status``.
    Unless ``parse``, the request is never parsed: untrusted bytes are not looked at
    (parsed, the access log learns its request id)."""
    streaming = (handler.request_streaming, handler.response_streaming) if handler else (False, False)

    async def reject(_request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort_with_status(status)

    deserializer = handler.request_deserializer if handler and parse else None
    return _FACTORIES[streaming](reject, request_deserializer=deserializer,
                                 response_serializer=handler.response_serializer if handler else None)


# --- drain ------------------------------------------------------------------------


class ServerState:
    """What the interceptors share with ``serve``: the draining flag and the count of
    RPCs in flight (health checks excluded: Watch streams live as long as a client)."""

    def __init__(self) -> None:
        self.draining = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def begin(self) -> None:
        self._in_flight += 1
        self._idle.clear()

    def end(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """True once no RPC is in flight; False when ``timeout`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False


class DrainInterceptor(grpc.aio.ServerInterceptor):
    """While draining, new RPCs (health excepted) end with UNAVAILABLE + RetryInfo,
    so clients retry on another replica."""

    def __init__(self, state: ServerState, retry_after_s: float = 1.0):
        self.state = state
        self.status = status_of(grpc.StatusCode.UNAVAILABLE, "DRAINING",
                                "the server is shutting down; retry on another replica",
                                retry_after_s=retry_after_s)

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if not self.state.draining or split_method(details.method)[0] == HEALTH_SERVICE:
            return handler
        return rejecting(handler, self.status, parse=True)


# --- observation ------------------------------------------------------------------


@dataclass
class CallRecord:
    """What one RPC did, filled in while it runs; read by the access log and metrics."""

    method: str  # full method name
    peer: str = ""
    request_id: str = ""
    model: str = ""
    adapter: str = ""  # Generate's adapter, as the client named it
    code: str = "OK"
    started: float = field(default_factory=time.perf_counter)
    duration_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    embed_tokens: int | None = None
    finish_reason: str = ""
    # Generate stream timing (perf_counter seconds)
    first_token_at: float | None = None
    last_token_at: float | None = None


class Observer:
    """Receives the life of each RPC. ``Metrics`` and the access log implement it."""

    def on_start(self, call: CallRecord) -> None: ...

    def on_tokens(self, call: CallRecord, count: int, now: float) -> None: ...

    def on_end(self, call: CallRecord) -> None: ...


class Malformed:
    """A request whose bytes did not parse; the behavior turns it into INVALID_ARGUMENT."""

    def __init__(self, type_name: str, error: Exception):
        self.type_name = type_name
        self.error = error


def _tolerant(deserializer: Callable | None, type_name: str) -> Callable | None:
    if deserializer is None:
        return None

    def parse(data: bytes):
        try:
            return deserializer(data)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the caller's bad input
            return Malformed(type_name, exc)

    return parse


def _malformed_status(bad: Malformed) -> grpc.Status:
    return status_of(grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST",
                     f"the request is not a valid {bad.type_name}: {bad.error}"[:512], field="request")


class ObservingInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every handler: counts it in flight (``ServerState``), turns unparsable
    requests into INVALID_ARGUMENT, follows Generate/Embed streams for token figures,
    and reports each finished call to the observers."""

    def __init__(self, state: ServerState, observers: list[Observer]):
        self.state = state
        self.observers = list(observers)

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if handler is None:
            return None
        method = details.method
        tracked = split_method(method)[0] != HEALTH_SERVICE
        inner = _behavior(handler)
        type_name = split_method(method)[1] + "Request"
        deserializer = handler.request_deserializer
        if not handler.request_streaming:
            deserializer = _tolerant(deserializer, type_name)

        def begin(request: Any, context: grpc.aio.ServicerContext) -> CallRecord:
            call = CallRecord(method)
            try:
                call.peer = context.peer() or ""
            except Exception:  # noqa: BLE001 - a peer is nice to have
                pass
            call.request_id = str(getattr(request, "request_id", "") or "")
            call.model = str(getattr(request, "model", "") or "")
            call.adapter = str(getattr(request, "adapter", "") or "")
            if tracked:
                self.state.begin()
            for o in self.observers:
                o.on_start(call)
            return call

        def end(call: CallRecord, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
            if tracked:
                self.state.end()
            call.duration_s = time.perf_counter() - call.started
            call.code = _code_name(context, error)
            for o in self.observers:
                try:
                    o.on_end(call)
                except Exception:  # noqa: BLE001 - observation never fails a call
                    logging.getLogger("service.interceptors").exception("observer failed")

        def observe(call: CallRecord, response: Any) -> None:
            if method == GENERATE:
                self._generate_event(call, response)
            elif method == EMBED:
                call.embed_tokens = (call.embed_tokens or 0) + int(getattr(response, "tokens", 0))

        if inspect.isasyncgenfunction(inner):
            async def stream_behavior(request: Any, context: grpc.aio.ServicerContext):
                call, error = begin(request, context), None
                try:
                    if isinstance(request, Malformed):
                        await context.abort_with_status(_malformed_status(request))
                    responses = inner(request, context)
                    async with contextlib.aclosing(responses):
                        async for response in responses:
                            observe(call, response)
                            yield response
                except BaseException as exc:
                    error = exc
                    raise
                finally:
                    end(call, context, error)

            behavior: Callable = stream_behavior
        else:
            async def plain_behavior(request: Any, context: grpc.aio.ServicerContext):
                call, error = begin(request, context), None
                try:
                    if isinstance(request, Malformed):
                        await context.abort_with_status(_malformed_status(request))
                    result = inner(request, context)
                    return await result if inspect.isawaitable(result) else result
                except BaseException as exc:
                    error = exc
                    raise
                finally:
                    end(call, context, error)

            behavior = plain_behavior
        factory = _FACTORIES[(handler.request_streaming, handler.response_streaming)]
        return factory(behavior, request_deserializer=deserializer,
                       response_serializer=handler.response_serializer)

    def _generate_event(self, call: CallRecord, response: Any) -> None:
        which = response.WhichOneof("event")
        if which == "started":
            s = response.started
            call.request_id = call.request_id or s.request_id
            call.model = s.model or call.model
            call.prompt_tokens, call.cached_tokens = s.prompt_tokens, s.cached_tokens
        elif which == "delta":
            count = len(response.delta.token_ids)
            if count:
                now = time.perf_counter()
                for o in self.observers:
                    o.on_tokens(call, count, now)
                if call.first_token_at is None:
                    call.first_token_at = now
                call.last_token_at = now
        elif which == "finished":
            f = response.finished
            call.prompt_tokens = f.usage.prompt_tokens
            call.completion_tokens = f.usage.completion_tokens
            call.cached_tokens = f.usage.cached_tokens
            call.finish_reason = _finish_name(f.reason)


def _finish_name(reason: int) -> str:
    name = gen_pb.FinishReason.Name(reason) if reason in gen_pb.FinishReason.values() else str(reason)
    return name.removeprefix("FINISH_REASON_").lower()


def _code_name(context: grpc.aio.ServicerContext, error: BaseException | None) -> str:
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return grpc.StatusCode.CANCELLED.name
    try:
        code = context.code()
    except Exception:  # noqa: BLE001
        code = None
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):  # some grpc versions keep the raw number
        for c in grpc.StatusCode:
            if c.value[0] == code:
                return c.name
    if error is not None:
        return grpc.StatusCode.UNKNOWN.name
    return grpc.StatusCode.OK.name
