"""Server interceptors: per-RPC observation and drain rejection.

Invariant: ``ObservingInterceptor`` is outermost, so every RPC (rejected ones included)
gets exactly one count and one access-log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from typing import Any, Callable, Iterator

import grpc

from .calls import CallRecord, Observer, code_name, follow, serving
from .handlers import (
    FACTORIES,
    HEALTH_SERVICE,
    STOPPING_METHODS,
    Malformed,
    behavior_of,
    is_probe,
    rejecting,
    split_method,
    tolerant,
)
from .status import status_of

log = logging.getLogger("service.interceptors")


class ServerState:
    """The draining flag and the RPCs in flight (health checks excluded), shared with ``serve``."""

    def __init__(self) -> None:
        self.draining = False
        self._calls: dict[object, grpc.aio.ServicerContext] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def in_flight(self) -> int:
        return len(self._calls)

    def begin(self, context: grpc.aio.ServicerContext) -> object:
        """Counts the task's RPC in flight; returns the token ``end`` takes."""
        token = asyncio.current_task() or object()
        self._calls[token] = context
        self._idle.clear()
        return token

    def end(self, token: object) -> None:
        self._calls.pop(token, None)
        if not self._calls:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """True once no RPC is in flight; False when ``timeout`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def cut(self, status: grpc.Status) -> int:
        """Ends every RPC in flight with ``status`` and cancels its handler; returns how many."""
        calls = list(self._calls.items())
        for token, context in calls:
            if not context.done():
                with contextlib.suppress(Exception):  # the AbortError meant for the handler
                    await context.abort_with_status(status)
            if isinstance(token, asyncio.Task):
                token.cancel()
        return len(calls)


class DrainInterceptor(grpc.aio.ServerInterceptor):
    """While draining, new RPCs end UNAVAILABLE + RetryInfo; probes and stopping calls still pass."""

    def __init__(self, state: ServerState, retry_after_s: float = 1.0):
        self.state = state
        self.status = status_of(grpc.StatusCode.UNAVAILABLE, "DRAINING",
                                "the server is shutting down; retry on another replica",
                                retry_after_s=retry_after_s)

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if not self.state.draining or is_probe(details.method) or details.method in STOPPING_METHODS:
            return handler
        return rejecting(handler, self.status, parse=True)


class ObservingInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every handler: in-flight count, INVALID_ARGUMENT for unparsable requests,
    token figures from streams, and one end report to the observers."""

    def __init__(self, state: ServerState, observers: list[Observer]):
        self.state = state
        self.observers = list(observers)

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if handler is None:
            return None
        deserializer = handler.request_deserializer
        if not handler.request_streaming:
            deserializer = tolerant(deserializer, split_method(details.method)[1] + "Request")
        inner = behavior_of(handler)
        wrap = self._streaming if inspect.isasyncgenfunction(inner) else self._plain
        factory = FACTORIES[(handler.request_streaming, handler.response_streaming)]
        return factory(wrap(details.method, inner), request_deserializer=deserializer,
                       response_serializer=handler.response_serializer)

    def _streaming(self, method: str, inner: Callable) -> Callable:
        async def behavior(request: Any, context: grpc.aio.ServicerContext):
            with self._observed(method, request, context) as call:
                if isinstance(request, Malformed):
                    await context.abort_with_status(request.status())
                async with contextlib.aclosing(inner(request, context)) as responses:
                    async for response in responses:
                        follow(method, call, response, self.observers)
                        yield response

        return behavior

    def _plain(self, method: str, inner: Callable) -> Callable:
        async def behavior(request: Any, context: grpc.aio.ServicerContext):
            with self._observed(method, request, context):
                if isinstance(request, Malformed):
                    await context.abort_with_status(request.status())
                result = inner(request, context)
                return await result if inspect.isawaitable(result) else result

        return behavior

    @contextlib.contextmanager
    def _observed(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> Iterator[CallRecord]:
        """One call's record, reported to the observers when it ends, however it ends."""

        call = CallRecord(method)
        with contextlib.suppress(Exception):  # a peer is nice to have
            call.peer = context.peer() or ""
        call.request_id = str(getattr(request, "request_id", "") or "")
        call.model = str(getattr(request, "model", "") or "")
        call.adapter = str(getattr(request, "adapter", "") or "")
        serving(call)
        token = self.state.begin(context) if split_method(method)[0] != HEALTH_SERVICE else None
        for o in self.observers:
            o.on_start(call)
        error = None
        try:
            yield call
        except BaseException as exc:
            error = exc
            raise
        finally:
            if token is not None:
                self.state.end(token)
            call.duration_s = time.perf_counter() - call.started
            call.code = code_name(context, error)
            for o in self.observers:
                try:
                    o.on_end(call)
                except Exception:  # observation never fails a call
                    log.exception("observer failed")
