"""Errors the engine raises. The service maps each class to one gRPC status code.

Every error carries a machine-readable ``reason`` (UPPER_SNAKE) and ``metadata``
(string pairs) that the service puts into google.rpc.ErrorInfo.
"""

from __future__ import annotations

ECHO_CHARS = 64  # the most characters of a client's string an error message repeats


def echo(text: str, limit: int = ECHO_CHARS) -> str:
    """A client-chosen string as an error message may repeat it: quoted, control
    characters escaped, cut to ``limit`` characters."""
    return repr(text[:limit]) + (f"... ({len(text)} characters)" if len(text) > limit else "")


class EngineError(Exception):
    """Base class. ``reason`` is stable and machine-readable."""

    reason = "ENGINE_ERROR"

    def __init__(self, message: str, *, metadata: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.metadata = dict(metadata or {})


class InvalidRequest(EngineError):
    """A field of the request has an invalid value (INVALID_ARGUMENT)."""

    reason = "INVALID_FIELD"

    def __init__(self, field: str, description: str):
        super().__init__(f"{field}: {description}", metadata={"field": field})
        self.field = field
        self.description = description


class ModelNotFound(EngineError):
    """No served model has the requested name (NOT_FOUND)."""

    reason = "MODEL_NOT_FOUND"

    def __init__(self, name: str, available: list[str]):
        super().__init__(
            f"model {echo(name)} is not served; available: {', '.join(available) or 'none'}",
            metadata={"model": name[:ECHO_CHARS]},
        )


class DuplicateRequestId(EngineError):
    """A running request already uses this id (ALREADY_EXISTS)."""

    reason = "DUPLICATE_REQUEST_ID"


class QueueFull(EngineError):
    """The admission queue is full; retry later (RESOURCE_EXHAUSTED)."""

    reason = "QUEUE_FULL"

    def __init__(self, message: str, *, retry_after_s: float = 1.0):
        super().__init__(message, metadata={"retry_after_s": f"{retry_after_s:g}"})
        self.retry_after_s = retry_after_s


class TenantLimit(EngineError):
    """A tenant's own limit (in flight, queued, tokens per minute) refuses the request
    now; retry later (RESOURCE_EXHAUSTED)."""

    reason = "TENANT_LIMIT"

    def __init__(self, message: str, *, tenant: str, limit: str, value: int, retry_after_s: float = 1.0):
        super().__init__(message, metadata={"tenant": tenant, "limit": limit, "limit_value": str(value),
                                            "retry_after_s": f"{retry_after_s:.3g}"})
        self.retry_after_s = retry_after_s


class CompilerBusy(QueueFull):
    """Every thread compiling response formats stayed busy for the whole compile
    timeout: overload, not bad input (RESOURCE_EXHAUSTED)."""

    reason = "COMPILER_BUSY"


class NotReady(EngineError):
    """The engine is loading or shutting down (UNAVAILABLE)."""

    reason = "NOT_READY"

    def __init__(self, message: str, *, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unsupported(EngineError):
    """The model cannot do what was asked, e.g. Embed on a model without pooling
    (FAILED_PRECONDITION)."""

    reason = "UNSUPPORTED_OPERATION"


class UnsupportedModel(Unsupported, ValueError):
    """A model file this server cannot serve: its architecture, a tensor or a tensor
    type (the message names it). Raised while a model loads, before serving."""

    reason = "UNSUPPORTED_MODEL"


class DoesNotFit(EngineError):
    """The request can never fit the model's memory plan or context (OUT_OF_RANGE)."""

    reason = "DOES_NOT_FIT"


class EngineFailure(EngineError):
    """An internal failure while serving a request (INTERNAL). The message is safe
    to show to clients; details are logged with the request id."""

    reason = "ENGINE_FAILURE"


class AdapterNotFound(EngineError):
    """No loaded adapter of the model has this name (NOT_FOUND)."""

    reason = "ADAPTER_NOT_FOUND"

    def __init__(self, model: str, name: str, available: list[str]):
        super().__init__(
            f"adapter {name!r} is not loaded on model {model!r}; loaded: {', '.join(available) or 'none'}",
            metadata={"model": model, "adapter": name})


class AdapterExists(EngineError):
    """An adapter of this name is already loaded, or being loaded (ALREADY_EXISTS)."""

    reason = "ADAPTER_EXISTS"


class AdapterMismatch(EngineError):
    """The adapter does not fit its base model: layer names, shapes or rank differ,
    or it targets layers that take no adapters here (FAILED_PRECONDITION)."""

    reason = "ADAPTER_MISMATCH"


class AdapterCapacity(EngineError):
    """No room for another adapter now: every slot is held by adapters in use, or its
    bytes do not fit beside the running requests; retry later (RESOURCE_EXHAUSTED)."""

    reason = "ADAPTER_CAPACITY"

    def __init__(self, message: str, *, metadata: dict[str, str] | None = None, retry_after_s: float = 1.0):
        super().__init__(message, metadata={**(metadata or {}), "retry_after_s": f"{retry_after_s:g}"})
        self.retry_after_s = retry_after_s


class EngineDead(EngineError):
    """A model's engine thread died or stopped making progress: nothing it holds will
    finish and the process must be restarted (UNAVAILABLE: retry on another replica)."""

    reason = "ENGINE_DEAD"

    def __init__(self, message: str, *, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class AdapterRootUnset(EngineError):
    """Adapters may be loaded over the API only from under the server's adapter root,
    and none is set (FAILED_PRECONDITION)."""

    reason = "ADAPTER_ROOT_UNSET"
