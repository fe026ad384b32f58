"""grpc_testing's in-memory server in front of the asyncio servicer: RPCs without a
network, ending with the same rich statuses a client would receive.

grpc_testing runs synchronous behaviors on threads of its own, so each call of the
(async) servicer is run on the event loop that owns the engines; an abort becomes
grpc_testing's code, details and trailing metadata (grpc-status-details-bin
included). The test awaits ``call`` / ``call_stream`` while that loop keeps serving.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field

import grpc
import grpc_testing
from google.rpc import error_details_pb2, status_pb2

from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["InferenceService"]
DETAIL_TYPES = (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest, error_details_pb2.RetryInfo)


class _Aborted(Exception):
    """The servicer ended the call with a status (already set on the context)."""


class _AsyncContext:
    """grpc_testing's servicer context with the awaitable abort of grpc.aio."""

    def __init__(self, context):
        self._context = context

    async def abort_with_status(self, status: grpc.Status) -> None:
        self._context.set_trailing_metadata(status.trailing_metadata)
        self._context.set_code(status.code)
        self._context.set_details(status.details)
        raise _Aborted()

    def __getattr__(self, name):
        return getattr(self._context, name)


class _OnLoop:
    """Synchronous stand-ins for the servicer's methods, run on ``loop``."""

    def __init__(self, servicer, loop: asyncio.AbstractEventLoop):
        self._servicer, self._loop = servicer, loop

    def _run(self, awaitable):
        async def wrapped():
            return await awaitable
        return asyncio.run_coroutine_threadsafe(wrapped(), self._loop).result()

    def __getattr__(self, name):
        method = getattr(self._servicer, name)
        if inspect.isasyncgenfunction(method):
            def stream(request, context):
                responses = method(request, _AsyncContext(context))
                try:
                    while True:
                        yield self._run(responses.__anext__())
                except (StopAsyncIteration, _Aborted):
                    return
            return stream

        def unary(request, context):
            try:
                return self._run(method(request, _AsyncContext(context)))
            except _Aborted:
                return None
        return unary


@dataclass
class Outcome:
    """How a call ended: its code, its details text, its google.rpc details by type name."""

    code: grpc.StatusCode
    message: str
    details: dict[str, object] = field(default_factory=dict)
    responses: list = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        bad = self.details.get("BadRequest")
        return [v.field for v in bad.field_violations] if bad else []

    @property
    def reason(self) -> str:
        info = self.details.get("ErrorInfo")
        return info.reason if info else ""


class ServicerHarness:
    def __init__(self, servicer):
        self._servicer = servicer
        self._server = None

    def _started(self):
        if self._server is None:  # on first use: the loop is the running one
            on_loop = _OnLoop(self._servicer, asyncio.get_running_loop())
            self._server = grpc_testing.server_from_dictionary({SERVICE: on_loop}, grpc_testing.strict_real_time())
        return self._server

    async def call(self, method: str, request) -> Outcome:
        server = self._started()

        def run():
            rpc = server.invoke_unary_unary(SERVICE.methods_by_name[method], (), request, None)
            response, trailing, code, message = rpc.termination()
            return _outcome(code, message, trailing, [response] if response is not None else [])

        return await asyncio.to_thread(run)

    async def call_stream(self, method: str, request) -> Outcome:
        server = self._started()

        def run():
            rpc = server.invoke_unary_stream(SERVICE.methods_by_name[method], (), request, None)
            trailing, code, message = rpc.termination()
            responses = []
            while (response := _take(rpc)) is not None:
                responses.append(response)
            return _outcome(code, message, trailing, responses)

        return await asyncio.to_thread(run)


def _take(rpc):
    try:
        return rpc.take_response()
    except ValueError:  # no more responses
        return None


def _outcome(code, message, trailing, responses) -> Outcome:
    found: dict[str, object] = {}
    for key, value in trailing or ():
        if key != "grpc-status-details-bin":
            continue
        for any_msg in status_pb2.Status.FromString(value).details:
            for cls in DETAIL_TYPES:
                if any_msg.Is(cls.DESCRIPTOR):
                    found[cls.DESCRIPTOR.name] = cls()
                    any_msg.Unpack(found[cls.DESCRIPTOR.name])
    return Outcome(code, message, found, responses)
