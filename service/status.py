"""Engine errors -> gRPC status with google.rpc details, in one place.

Every error carries ErrorInfo (reason, domain, metadata); invalid fields add a
BadRequest field violation; overload and unavailability add RetryInfo.
Unexpected exceptions become INTERNAL with a generic message: the traceback goes
to the log with the request id, never to the client.
"""

from __future__ import annotations

import logging

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from engine import errors

DOMAIN = "mlxgrpc.v1"
log = logging.getLogger("service.status")

_CODES: list[tuple[type[errors.EngineError], grpc.StatusCode]] = [
    (errors.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.ModelNotFound, grpc.StatusCode.NOT_FOUND),
    (errors.RequestNotFound, grpc.StatusCode.NOT_FOUND),
    (errors.DuplicateRequestId, grpc.StatusCode.ALREADY_EXISTS),
    (errors.QueueFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.NotReady, grpc.StatusCode.UNAVAILABLE),
    (errors.Unsupported, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.DoesNotFit, grpc.StatusCode.OUT_OF_RANGE),
    (errors.EngineFailure, grpc.StatusCode.INTERNAL),
    (errors.AdapterNotFound, grpc.StatusCode.NOT_FOUND),
    (errors.AdapterExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.AdapterMismatch, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.AdapterCapacity, grpc.StatusCode.RESOURCE_EXHAUSTED),
]


def code_for(error: errors.EngineError) -> grpc.StatusCode:
    for cls, code in _CODES:
        if isinstance(error, cls):
            return code
    return grpc.StatusCode.INTERNAL


def to_status(error: BaseException, request_id: str = "") -> grpc.Status:
    """The rich status for ``error`` (an EngineError, or anything else as INTERNAL)."""
    if not isinstance(error, errors.EngineError):
        log.error("internal error (request %s)", request_id or "-", exc_info=error)
        error = errors.EngineFailure("internal error; see the server log")
    code = code_for(error)
    metadata = dict(error.metadata)
    if request_id:
        metadata["request_id"] = request_id
    details = [error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=metadata)]
    if isinstance(error, errors.InvalidRequest):
        details.append(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=error.field, description=error.description)]))
    retry = getattr(error, "retry_after_s", None)
    if retry is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(retry * 1000))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=error.message)
    for detail in details:
        status.details.add().Pack(detail)
    return rpc_status.to_status(status)


async def abort(context: grpc.aio.ServicerContext, error: BaseException, request_id: str = "") -> None:
    """Ends the RPC with the rich status of ``error`` (raises AbortError)."""
    await context.abort_with_status(to_status(error, request_id))


def status_of(code: grpc.StatusCode, reason: str, message: str, *,
              metadata: dict[str, str] | None = None, field: str = "",
              retry_after_s: float | None = None) -> grpc.Status:
    """A rich status for a service-level condition that is no engine error
    (authentication, draining, an unparsable message): ErrorInfo with ``reason``,
    plus BadRequest naming ``field`` and RetryInfo when given."""
    details = [error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=dict(metadata or {}))]
    if field:
        details.append(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=field, description=message)]))
    if retry_after_s is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(retry_after_s * 1000))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message)
    for detail in details:
        status.details.add().Pack(detail)
    return rpc_status.to_status(status)
