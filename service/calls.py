"""What one RPC did (``CallRecord``), who is told (``Observer``), and how its end is
named: the status code a call ended with, and labels a client cannot multiply.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from .gen.mlxgrpc.v1 import inference_service_pb2 as pb
from .handlers import split_method

GENERATE = "/mlxgrpc.v1.InferenceService/Generate"
EMBED = "/mlxgrpc.v1.InferenceService/Embed"
UNKNOWN = "unknown"  # the label of a method or model this server does not serve
KNOWN_METHODS = frozenset(
    f"/{service.full_name}/{method.name}"
    for service in (pb.DESCRIPTOR.services_by_name["InferenceService"],
                    health_pb2.DESCRIPTOR.services_by_name["Health"],
                    reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"])
    for method in service.methods)


@dataclass
class CallRecord:
    """What one RPC did, filled in while it runs; read by the access log and metrics."""

    method: str  # full method name, as the client sent it
    peer: str = ""
    request_id: str = ""
    model: str = ""
    code: str = "OK"
    started: float = field(default_factory=time.perf_counter)
    duration_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    draft_tokens: int = 0  # speculative decoding: drafts verified, and those kept
    accepted_draft_tokens: int = 0
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


def method_labels(full: str) -> tuple[str, str]:
    """(service, method) of a served method; ('unknown', 'unknown') for any other name."""
    return split_method(full) if full in KNOWN_METHODS else (UNKNOWN, UNKNOWN)


def code_name(context: grpc.aio.ServicerContext, error: BaseException | None) -> str:
    """The status a call ended with: the one it was aborted with; for a call whose
    handler was cancelled, DEADLINE_EXCEEDED once its deadline has passed, else
    CANCELLED; UNKNOWN for any other exception; else OK."""
    code = _code(context)
    if code is not None:
        return code.name
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        remaining = _time_remaining(context)
        expired = remaining is not None and remaining <= 0
        return (grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED).name
    return grpc.StatusCode.UNKNOWN.name if error is not None else grpc.StatusCode.OK.name


def _code(context: grpc.aio.ServicerContext) -> grpc.StatusCode | None:
    try:
        code = context.code()
    except Exception:  # noqa: BLE001
        return None
    if isinstance(code, int):  # some grpc versions keep the raw number
        code = next((c for c in grpc.StatusCode if c.value[0] == code), None)
    return code if isinstance(code, grpc.StatusCode) else None


def _time_remaining(context: grpc.aio.ServicerContext) -> float | None:
    try:
        return context.time_remaining()
    except Exception:  # noqa: BLE001
        return None
