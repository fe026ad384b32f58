"""Plumbing for interceptors that wrap or replace a method handler (names, rejecting handlers,
tolerant parsing)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import grpc
from grpc_health.v1 import health

from .status import status_of

HEALTH_SERVICE = health.SERVICE_NAME  # grpc.health.v1.Health
WORKER_HEALTH = "/mlx.grpc.engine.MlxEngine/HealthCheck"  # a probe: open and answered while draining
# Calls that only stop work: answered while draining too.
STOPPING_METHODS = frozenset({"/mlxgrpc.v1.InferenceService/Cancel", "/mlx.grpc.engine.MlxEngine/Abort",
                              "/vllm.grpc.engine.VllmEngine/Abort"})
# A refused streaming client's burst is drained (bounded) so its writes do not hide the status.
REFUSED_MESSAGES = 32
REFUSED_MESSAGE_WAIT_S = 0.1

FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def split_method(full: str) -> tuple[str, str]:
    """'/pkg.Service/Method' -> ('pkg.Service', 'Method')."""
    service, _, method = full.lstrip("/").rpartition("/")
    return service, method


def is_probe(full: str) -> bool:
    """Health checks: never behind a token, answered while draining."""
    return split_method(full)[0] == HEALTH_SERVICE or full == WORKER_HEALTH


def behavior_of(handler: grpc.RpcMethodHandler) -> Callable:
    return handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream


def rejecting(handler: grpc.RpcMethodHandler | None, status: grpc.Status, *,
              parse: bool = False) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s shape that ends every call with ``status``; the request is parsed
    only with ``parse``."""
    streaming = (handler.request_streaming, handler.response_streaming) if handler else (False, False)

    async def reject(request: Any, context: grpc.aio.ServicerContext) -> None:
        if streaming[0]:
            await _drop_requests(request)
        await context.abort_with_status(status)

    deserializer = handler.request_deserializer if handler and parse else None
    return FACTORIES[streaming](reject, request_deserializer=deserializer,
                                response_serializer=handler.response_serializer if handler else None)


async def _drop_requests(requests) -> None:
    """Reads what a streaming client sends in a burst (bounded in count and time)."""
    pending = requests.__aiter__()
    for _ in range(REFUSED_MESSAGES):
        try:
            await asyncio.wait_for(pending.__anext__(), REFUSED_MESSAGE_WAIT_S)
        except (StopAsyncIteration, asyncio.TimeoutError):
            return


class Malformed:
    """A request whose bytes did not parse; the behavior turns it into INVALID_ARGUMENT."""

    def __init__(self, type_name: str, error: Exception):
        self.type_name = type_name
        self.error = error

    def status(self) -> grpc.Status:
        return status_of(grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST",
                         f"the request is not a valid {self.type_name}: {self.error}", field="request")


def tolerant(deserializer: Callable | None, type_name: str) -> Callable | None:
    if deserializer is None:
        return None

    def parse(data: bytes):
        try:
            return deserializer(data)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the caller's bad input
            return Malformed(type_name, exc)

    return parse
