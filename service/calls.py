"""What one RPC did (``CallRecord``), who is told (``Observer``), and how its end is named.

Invariant: labels never take a client's string as it is (unserved methods are ``unknown``).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import grpc
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
from smg_grpc_proto import vllm_engine_pb2 as vllm_pb

from .gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from .gen.mlxgrpc.v1 import inference_service_pb2 as pb
from .handlers import split_method

GENERATE = "/mlxgrpc.v1.InferenceService/Generate"
EMBED = "/mlxgrpc.v1.InferenceService/Embed"
WORKER_GENERATES = frozenset({"/mlx.grpc.engine.MlxEngine/Generate", "/vllm.grpc.engine.VllmEngine/Generate"})
UNKNOWN = "unknown"  # the label of a method or model this server does not serve
KNOWN_METHODS = frozenset(
    f"/{service.full_name}/{method.name}"
    for service in (pb.DESCRIPTOR.services_by_name["InferenceService"],
                    mlx_pb.DESCRIPTOR.services_by_name["MlxEngine"],
                    vllm_pb.DESCRIPTOR.services_by_name["VllmEngine"],
                    health_pb2.DESCRIPTOR.services_by_name["Health"],
                    reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"])
    for method in service.methods)


@dataclass
class CallRecord:
    """What one RPC did, filled in while it runs."""

    method: str  # full method name, as the client sent it
    peer: str = ""
    tenant: str = ""  # the caller's tenant (set by the auth interceptor; "" when anonymous)
    request_id: str = ""
    model: str = ""
    adapter: str = ""
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
    first_token_at: float | None = None
    last_token_at: float | None = None
    # the engine's Finished timings (queue_s, time_to_first_token_s, total_s) and when it came (perf_counter)
    timings: tuple[float, float, float] | None = None
    finished_at: float | None = None


class Observer:
    """Receives the life of each RPC."""

    def on_start(self, call: CallRecord) -> None: ...

    def on_tokens(self, call: CallRecord, count: int, now: float) -> None: ...

    def on_end(self, call: CallRecord) -> None: ...


_CURRENT: contextvars.ContextVar[CallRecord | None] = contextvars.ContextVar("call", default=None)


def finished(timings: Any) -> None:
    """The engine's Finished ``timings`` (engine.events.Timings) of the call this task serves, for a
    contract whose reply carries none (InferenceService's do: ``follow`` takes them)."""
    call = _CURRENT.get()
    if call is not None:
        call.timings = (timings.queue_s, timings.time_to_first_token_s, timings.total_s)
        call.finished_at = time.perf_counter()


def serving(call: CallRecord) -> None:
    _CURRENT.set(call)


def current_call() -> CallRecord | None:
    """The record of the RPC this task serves."""
    return _CURRENT.get()


def follow(method: str, call: CallRecord, response: Any, observers: Iterable[Observer]) -> None:
    """Takes what a streamed ``response`` of ``method`` tells about the call."""
    if method == GENERATE:
        _generate_event(call, response, observers)
    elif method in WORKER_GENERATES:
        _worker_event(call, response, observers)
    elif method == EMBED:
        call.embed_tokens = (call.embed_tokens or 0) + int(getattr(response, "tokens", 0))


def _generate_event(call: CallRecord, response: Any, observers: Iterable[Observer]) -> None:
    which = response.WhichOneof("event")
    if which == "started":
        s = response.started
        call.request_id = call.request_id or s.request_id
        call.model = s.model or call.model
        call.prompt_tokens, call.cached_tokens = s.prompt_tokens, s.cached_tokens
    elif which == "delta":
        _tokens(call, len(response.delta.token_ids), observers)
    elif which == "finished":
        f = response.finished
        call.prompt_tokens = f.usage.prompt_tokens
        call.completion_tokens = f.usage.completion_tokens
        call.cached_tokens = f.usage.cached_tokens
        call.draft_tokens, call.accepted_draft_tokens = f.usage.draft_tokens, f.usage.accepted_draft_tokens
        call.finish_reason = _finish_name(f.reason)
        t = f.timings
        call.timings = (t.queue_seconds, t.time_to_first_token_seconds, t.total_seconds)
        call.finished_at = time.perf_counter()


def _worker_event(call: CallRecord, response: Any, observers: Iterable[Observer]) -> None:
    if response.HasField("chunk"):
        part = response.chunk
        _tokens(call, len(part.token_ids), observers)
    else:
        part = response.complete
        _tokens(call, len(part.output_ids), observers)  # unstreamed: every token at once
        # n samples end one by one: their tokens add up
        call.completion_tokens = (call.completion_tokens or 0) + part.completion_tokens
        call.finish_reason = part.finish_reason
    call.prompt_tokens, call.cached_tokens = part.prompt_tokens, part.cached_tokens


def _tokens(call: CallRecord, count: int, observers: Iterable[Observer]) -> None:
    if count:
        now = time.perf_counter()
        for o in observers:
            o.on_tokens(call, count, now)
        if call.first_token_at is None:
            call.first_token_at = now
        call.last_token_at = now


def _finish_name(reason: int) -> str:
    name = gen_pb.FinishReason.Name(reason) if reason in gen_pb.FinishReason.values() else str(reason)
    return name.removeprefix("FINISH_REASON_").lower()


def method_labels(full: str) -> tuple[str, str]:
    """(service, method) of a served method; ('unknown', 'unknown') for any other name."""
    return split_method(full) if full in KNOWN_METHODS else (UNKNOWN, UNKNOWN)


def code_name(context: grpc.aio.ServicerContext, error: BaseException | None) -> str:
    """The status a call ended with: its abort code; if cancelled, DEADLINE_EXCEEDED or CANCELLED;
    UNKNOWN for another exception; else OK."""
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
