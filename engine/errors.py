"""Errors the engine raises; each class maps to one gRPC status code, and carries a stable
``reason`` and string ``metadata`` for google.rpc.ErrorInfo."""

from __future__ import annotations

ECHO_CHARS = 64  # the most characters of a client's string an error message repeats


def echo(text: str, limit: int = ECHO_CHARS) -> str:
    """A client-chosen string as an error message may repeat it: quoted, escaped, cut to ``limit``."""
    return repr(text[:limit]) + (f"... ({len(text)} characters)" if len(text) > limit else "")


class EngineError(Exception):

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
    """A tenant's own limit refuses the request now (RESOURCE_EXHAUSTED)."""

    reason = "TENANT_LIMIT"

    def __init__(self, message: str, *, tenant: str, limit: str, value: int, retry_after_s: float = 1.0):
        super().__init__(message, metadata={"tenant": tenant, "limit": limit, "limit_value": str(value),
                                            "retry_after_s": f"{retry_after_s:.3g}"})
        self.retry_after_s = retry_after_s


class CompilerBusy(QueueFull):
    """Every grammar-compiling thread stayed busy for the compile timeout (RESOURCE_EXHAUSTED)."""

    reason = "COMPILER_BUSY"


class NotReady(EngineError):
    """The engine is loading or shutting down (UNAVAILABLE)."""

    reason = "NOT_READY"

    def __init__(self, message: str, *, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unsupported(EngineError):
    """The model cannot do what was asked (FAILED_PRECONDITION)."""

    reason = "UNSUPPORTED_OPERATION"


class NotServed(EngineError):
    """An operation of a contract that this server does not implement (UNIMPLEMENTED)."""

    reason = "NOT_SERVED"


class UnsupportedModel(Unsupported, ValueError):
    """A model file this server cannot serve; raised while loading."""

    reason = "UNSUPPORTED_MODEL"


class DoesNotFit(EngineError):
    """The request can never fit the model's memory plan or context (OUT_OF_RANGE)."""

    reason = "DOES_NOT_FIT"


class EngineFailure(EngineError):
    """An internal failure (INTERNAL); the message is safe to show clients."""

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
    """The adapter does not fit its base model (FAILED_PRECONDITION)."""

    reason = "ADAPTER_MISMATCH"


class AdapterCapacity(EngineError):
    """No room for another adapter now (RESOURCE_EXHAUSTED)."""

    reason = "ADAPTER_CAPACITY"

    def __init__(self, message: str, *, metadata: dict[str, str] | None = None, retry_after_s: float = 1.0):
        super().__init__(message, metadata={**(metadata or {}), "retry_after_s": f"{retry_after_s:g}"})
        self.retry_after_s = retry_after_s


class EngineDead(EngineError):
    """A model's engine thread died or stalled; the process must restart (UNAVAILABLE)."""

    reason = "ENGINE_DEAD"

    def __init__(self, message: str, *, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestCancelled(EngineError):
    """The request was cancelled by a Cancel call while its caller still waited (CANCELLED)."""

    reason = "REQUEST_CANCELLED"


class AdapterRootUnset(EngineError):
    """API adapter loads need an adapter root, and none is set (FAILED_PRECONDITION)."""

    reason = "ADAPTER_ROOT_UNSET"


class ModelExists(EngineError):
    """A model of this name is served, or being loaded (ALREADY_EXISTS)."""

    reason = "MODEL_EXISTS"


class ModelRootUnset(EngineError):
    """API model loads need a model root, and none is set (FAILED_PRECONDITION)."""

    reason = "MODEL_ROOT_UNSET"


class ModelHeld(EngineError):
    """The model may not be unloaded now: it is loading, or a worker contract serves it (FAILED_PRECONDITION)."""

    reason = "MODEL_HELD"


class NoRoomForModel(EngineError):
    """Every resident model that could make room is in use or pinned (RESOURCE_EXHAUSTED)."""

    reason = "NO_ROOM_FOR_MODEL"

    def __init__(self, message: str, *, metadata: dict[str, str] | None = None, retry_after_s: float = 1.0):
        super().__init__(message, metadata={**(metadata or {}), "retry_after_s": f"{retry_after_s:g}"})
        self.retry_after_s = retry_after_s
