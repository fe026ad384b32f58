"""Engine errors -> gRPC status with google.rpc details, in one place.

Invariants: unexpected exceptions become INTERNAL with a generic message (traceback only
in the log); everything a status repeats is cut short, so trailers always fit.
"""

from __future__ import annotations

import functools
import inspect
import logging
from contextlib import aclosing
from typing import Callable

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from engine import errors

DOMAIN = "mlxgrpc.v1"
MAX_MESSAGE_CHARS = 1024  # status messages and field violation descriptions
MAX_METADATA_CHARS = 128  # each ErrorInfo metadata value
log = logging.getLogger("service.status")
ADMIN_ROLE_REQUIRED = "ADMIN_ROLE_REQUIRED"  # PERMISSION_DENIED: the method needs the admin role
ROUTER_ROLE_REQUIRED = "ROUTER_ROLE_REQUIRED"  # PERMISSION_DENIED: the method needs the router (or admin) role


MAX_MESSAGE_BYTES = 16 << 20  # the server's message size limit unless configured


class ResponseTooLarge(Exception):
    """A reply would exceed the message size limit (RESOURCE_EXHAUSTED, no RetryInfo)."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"the reply would be {size} bytes, over the server's message limit of {limit} bytes; "
                         "send less per request")
        self.size, self.limit = size, limit


_CODES: list[tuple[type[errors.EngineError], grpc.StatusCode]] = [
    (errors.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.ModelNotFound, grpc.StatusCode.NOT_FOUND),
    (errors.DuplicateRequestId, grpc.StatusCode.ALREADY_EXISTS),
    (errors.QueueFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.TenantLimit, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.NotReady, grpc.StatusCode.UNAVAILABLE),
    (errors.EngineDead, grpc.StatusCode.UNAVAILABLE),
    (errors.Unsupported, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.NotServed, grpc.StatusCode.UNIMPLEMENTED),
    (errors.DoesNotFit, grpc.StatusCode.OUT_OF_RANGE),
    (errors.EngineFailure, grpc.StatusCode.INTERNAL),
    (errors.AdapterNotFound, grpc.StatusCode.NOT_FOUND),
    (errors.AdapterExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.AdapterMismatch, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.AdapterCapacity, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.AdapterRootUnset, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.RequestCancelled, grpc.StatusCode.CANCELLED),
    (errors.ModelExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.ModelRootUnset, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.ModelHeld, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.NoRoomForModel, grpc.StatusCode.RESOURCE_EXHAUSTED),
]


def code_for(error: errors.EngineError) -> grpc.StatusCode:
    for cls, code in _CODES:
        if isinstance(error, cls):
            return code
    return grpc.StatusCode.INTERNAL


def to_status(error: BaseException, request_id: str = "") -> grpc.Status:
    """The rich status for ``error`` (an EngineError, or anything else as INTERNAL)."""
    if isinstance(error, ResponseTooLarge):
        return status_of(grpc.StatusCode.RESOURCE_EXHAUSTED, "RESPONSE_TOO_LARGE", str(error),
                         metadata={"size_bytes": str(error.size), "limit_bytes": str(error.limit)})
    if not isinstance(error, errors.EngineError):
        log.error("internal error (request %s)", request_id[:MAX_METADATA_CHARS] or "-", exc_info=error)
        error = errors.EngineFailure("internal error; see the server log")
    metadata = dict(error.metadata) | ({"request_id": request_id} if request_id else {})
    field = error.field if isinstance(error, errors.InvalidRequest) else ""
    return status_of(code_for(error), error.reason, error.message, metadata=metadata, field=field,
                     description=getattr(error, "description", ""),
                     retry_after_s=getattr(error, "retry_after_s", None))


async def abort(context: grpc.aio.ServicerContext, error: BaseException, request_id: str = "") -> None:
    """Ends the RPC with the rich status of ``error`` (raises AbortError)."""
    await context.abort_with_status(to_status(error, request_id))


def mapped(translate: Callable[[BaseException], BaseException] = lambda error: error):
    """Decorates a servicer method: whatever it raises ends the RPC with the rich status
    of ``translate(error)``."""

    def decorate(method):
        if inspect.isasyncgenfunction(method):
            @functools.wraps(method)
            async def streaming(self, request, context: grpc.aio.ServicerContext):
                try:
                    async with aclosing(method(self, request, context)) as replies:
                        async for reply in replies:
                            yield reply
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:  # noqa: BLE001 - every error is mapped here
                    await abort(context, translate(exc), getattr(request, "request_id", ""))
            streaming.maps_errors = True
            return streaming

        @functools.wraps(method)
        async def unary(self, request, context: grpc.aio.ServicerContext):
            try:
                return await method(self, request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:  # noqa: BLE001
                await abort(context, translate(exc), getattr(request, "request_id", ""))
        unary.maps_errors = True
        return unary

    return decorate


def status_of(code: grpc.StatusCode, reason: str, message: str, *,
              metadata: dict[str, str] | None = None, field: str = "", description: str = "",
              retry_after_s: float | None = None) -> grpc.Status:
    """A rich status: ErrorInfo, plus a BadRequest violation of ``field`` and RetryInfo when given."""

    metadata = {key: value[:MAX_METADATA_CHARS] for key, value in (metadata or {}).items()}
    details = [error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata)]
    if field:
        details.append(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=field,
                                                        description=(description or message)[:MAX_MESSAGE_CHARS])]))
    if retry_after_s is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(retry_after_s * 1000))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message[:MAX_MESSAGE_CHARS])
    for detail in details:
        status.details.add().Pack(detail)
    return rpc_status.to_status(status)
