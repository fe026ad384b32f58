"""OpenTelemetry tracing of Generate RPCs, off unless an OTLP endpoint is configured.

Every method named ``Generate`` (InferenceService's, SMG's worker contract's) gets a SERVER span
whose parent is the W3C ``traceparent`` / ``tracestate`` the caller put in the metadata (a call
without one starts a trace), with children ``queue``, ``prefill`` and ``decode`` placed by the
engine's Finished timings. Spans leave through a BatchSpanProcessor and the OTLP/gRPC exporter.

Invariants: nothing here imports OpenTelemetry until tracing is configured, so the server runs
without the packages; with tracing off no provider exists and no interceptor is added (no
per-request work at all); tracing never fails a call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import os
import time
from typing import Any, Callable

import grpc

from .calls import CallRecord, code_name, current_call
from .handlers import FACTORIES, behavior_of, split_method

log = logging.getLogger("service.tracing")
SERVICE_NAME = "mlx-grpc"  # the resource's service.name
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
TRACED_METHOD = "Generate"  # of any served service
CARRIER_KEYS = ("traceparent", "tracestate")  # W3C trace context, as grpc metadata keys
# A server span is an error only for these codes; a caller's mistakes (INVALID_ARGUMENT, ...) are not.
SERVER_ERRORS = frozenset({"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
                           "DATA_LOSS"})
INSTALL_HINT = "pip install 'mlx-grpc[tracing]'"


class TracingUnavailable(RuntimeError):
    """Tracing is configured but the OpenTelemetry packages are not installed."""


def endpoint(options: Any) -> str | None:
    """Where spans go: ``options.otlp_endpoint``, else the standard OTLP variables; None: off
    (also when $OTEL_SDK_DISABLED is true)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if options.otlp_endpoint:
        return options.otlp_endpoint
    return next((os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v)), None)


def check(options: Any) -> str:
    """Why the configured tracing cannot start ("" when it can, or is off)."""
    if options.tracer_provider is not None or endpoint(options) is None:
        return ""
    try:
        _import_sdk()
    except TracingUnavailable as exc:
        return str(exc)
    return ""


def configured(options: Any) -> Any:
    """``options`` with its ``tracer_provider`` (built for the OTLP endpoint when it has none);
    ``options`` itself when tracing is off or the provider is given. Raises TracingUnavailable."""
    if options.tracer_provider is not None:
        return options
    where = endpoint(options)
    if where is None:
        return options
    provider = otlp_provider(where if options.otlp_endpoint else None)
    log.info("tracing Generate RPCs to %s", where)
    return dataclasses.replace(options, tracer_provider=provider)


def otlp_provider(where: str | None) -> Any:
    """A TracerProvider (service.name mlx-grpc) exporting in batches over OTLP/gRPC to ``where``
    (None: the exporter reads $OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT and its other variables)."""
    _, _, export = _import_sdk()
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise TracingUnavailable(_missing(exc)) from exc
    return new_provider(export.BatchSpanProcessor(OTLPSpanExporter(endpoint=where)))


def new_provider(processor: Any) -> Any:
    """A TracerProvider with the resource service.name=mlx-grpc ($OTEL_SERVICE_NAME and
    $OTEL_RESOURCE_ATTRIBUTES win) and ``processor`` (tests: a SimpleSpanProcessor over an
    InMemorySpanExporter)."""
    resources, sdk_trace, _ = _import_sdk()
    provider = sdk_trace.TracerProvider(resource=resources.Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(processor)
    return provider


def shutdown(options: Any) -> None:
    """Flushes and stops ``options``' provider, if any (``serve`` does when it stops)."""
    provider = options.tracer_provider
    if provider is not None:
        with contextlib.suppress(Exception):
            provider.shutdown()


def interceptors(options: Any) -> list[grpc.aio.ServerInterceptor]:
    """[the interceptor tracing Generate RPCs] when tracing is on, else none."""
    provider = configured(options).tracer_provider
    return [] if provider is None else [TracingInterceptor(provider)]


def _import_sdk():
    try:
        from opentelemetry.sdk import resources
        from opentelemetry.sdk import trace as sdk_trace
        from opentelemetry.sdk.trace import export
    except ImportError as exc:
        raise TracingUnavailable(_missing(exc)) from exc
    return resources, sdk_trace, export


def _missing(exc: ImportError) -> str:
    return (f"tracing is configured (--otlp-endpoint or ${ENDPOINT_VARS[1]}) but OpenTelemetry is not "
            f"installed ({exc}): {INSTALL_HINT}, or unset it")


class TracingInterceptor(grpc.aio.ServerInterceptor):
    """Wraps the handler of every ``Generate`` method in a span; other methods pass untouched.
    Placed inside ObservingInterceptor, it reads the call's CallRecord when the call ends."""

    def __init__(self, provider: Any):
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace = trace
        self.tracer = provider.get_tracer("service.tracing")
        self.propagator = TraceContextTextMapPropagator()

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if handler is None or split_method(details.method)[1] != TRACED_METHOD:
            return handler
        inner = behavior_of(handler)
        wrap = self._streaming if inspect.isasyncgenfunction(inner) else self._plain
        factory = FACTORIES[(handler.request_streaming, handler.response_streaming)]
        return factory(wrap(details.method, inner), request_deserializer=handler.request_deserializer,
                       response_serializer=handler.response_serializer)

    def _streaming(self, method: str, inner: Callable) -> Callable:
        async def behavior(request: Any, context: grpc.aio.ServicerContext):
            with self._span(method, context):
                async with contextlib.aclosing(inner(request, context)) as responses:
                    async for response in responses:
                        yield response

        return behavior

    def _plain(self, method: str, inner: Callable) -> Callable:  # a refusing handler (auth, drain)
        async def behavior(request: Any, context: grpc.aio.ServicerContext):
            with self._span(method, context):
                result = inner(request, context)
                return await result if inspect.isawaitable(result) else result

        return behavior

    @contextlib.contextmanager
    def _span(self, method: str, context: grpc.aio.ServicerContext):
        clock = Clock()
        span = None
        try:
            service, name = split_method(method)
            span = self.tracer.start_span(
                f"{service}/{name}", context=self._parent(context), kind=self.trace.SpanKind.SERVER,
                start_time=clock.start_ns,
                attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name})
        except Exception:  # tracing never fails a call
            log.exception("could not start a span")
        error = None
        try:
            yield
        except BaseException as exc:
            error = exc
            raise
        finally:
            if span is not None:
                try:
                    self._end(span, clock, current_call(), code_name(context, error))
                except Exception:
                    log.exception("could not end a span")

    def _parent(self, context: grpc.aio.ServicerContext):
        """The caller's trace context from the metadata (None: a new trace)."""
        carrier = {k: v for k, v in (context.invocation_metadata() or ()) if k in CARRIER_KEYS and isinstance(v, str)}
        return self.propagator.extract(carrier) if carrier else None

    def _end(self, span: Any, clock: "Clock", call: CallRecord | None, code: str) -> None:
        end = time.perf_counter()
        span.set_attributes({"rpc.grpc.status_code": grpc.StatusCode[code].value[0], "mlxgrpc.status": code})
        if code in SERVER_ERRORS:
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, code))
        if call is not None:
            span.set_attributes(attributes(call))
            parts = phases(call)
            if parts:
                parent = self.trace.set_span_in_context(span)
                for name, begin, until in parts:
                    begin, until = min(max(begin, clock.start), end), min(max(until, clock.start), end)
                    self.tracer.start_span(name, context=parent, start_time=clock.ns(begin)).end(clock.ns(until))
        span.end(clock.ns(end))


def attributes(call: CallRecord) -> dict[str, Any]:
    """The span attributes of what the call did (those it never learned are left out)."""
    found: dict[str, Any] = {"gen_ai.request.model": call.model, "mlxgrpc.request_id": call.request_id,
             "mlxgrpc.tenant": call.tenant, "mlxgrpc.adapter": call.adapter,
             "gen_ai.usage.input_tokens": call.prompt_tokens, "gen_ai.usage.output_tokens": call.completion_tokens,
             "mlxgrpc.cached_tokens": call.cached_tokens, "mlxgrpc.finish_reason": call.finish_reason}
    if call.finish_reason:
        found["gen_ai.response.finish_reasons"] = (call.finish_reason,)
    return {k: v for k, v in found.items() if v is not None and v != ""}


def phases(call: CallRecord) -> list[tuple[str, float, float]]:
    """(name, start, end) of queue, prefill and decode in perf_counter seconds, placed back from the
    moment the engine's Finished came by its timings (none without one). queue: from the request's
    arrival at the engine (tokenizing, a grammar's compile, waiting for a slot) to its admission;
    prefill: to the first token; decode: to the end."""
    if call.timings is None or call.finished_at is None:
        return []
    queue_s, first_token_s, total_s = call.timings
    end = call.finished_at
    arrived = end - total_s
    admitted = min(arrived + queue_s, end)
    parts = [("queue", arrived, admitted)]
    if first_token_s > 0:
        first = min(max(arrived + first_token_s, admitted), end)
        parts += [("prefill", admitted, first), ("decode", first, end)]
    elif admitted < end:  # ended before a first token
        parts.append(("prefill", admitted, end))
    return parts


class Clock:
    """perf_counter readings as wall-clock nanoseconds, anchored at the span's start."""

    def __init__(self) -> None:
        self.start_ns, self.start = time.time_ns(), time.perf_counter()

    def ns(self, perf: float) -> int:
        return self.start_ns + int((perf - self.start) * 1e9)
