from mlxgrpc_client.gen.mlxgrpc.v1 import model_pb2 as _model_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_STATE_UNSPECIFIED: _ClassVar[ModelState]
    MODEL_STATE_LOADING: _ClassVar[ModelState]
    MODEL_STATE_READY: _ClassVar[ModelState]
    MODEL_STATE_UNLOADING: _ClassVar[ModelState]
    MODEL_STATE_UNLOADED: _ClassVar[ModelState]

class LoadStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOAD_STAGE_UNSPECIFIED: _ClassVar[LoadStage]
    LOAD_STAGE_RESOLVING: _ClassVar[LoadStage]
    LOAD_STAGE_PLANNING: _ClassVar[LoadStage]
    LOAD_STAGE_READING: _ClassVar[LoadStage]
    LOAD_STAGE_CONVERTING: _ClassVar[LoadStage]
    LOAD_STAGE_WARMING: _ClassVar[LoadStage]
    LOAD_STAGE_SERVING: _ClassVar[LoadStage]
MODEL_STATE_UNSPECIFIED: ModelState
MODEL_STATE_LOADING: ModelState
MODEL_STATE_READY: ModelState
MODEL_STATE_UNLOADING: ModelState
MODEL_STATE_UNLOADED: ModelState
LOAD_STAGE_UNSPECIFIED: LoadStage
LOAD_STAGE_RESOLVING: LoadStage
LOAD_STAGE_PLANNING: LoadStage
LOAD_STAGE_READING: LoadStage
LOAD_STAGE_CONVERTING: LoadStage
LOAD_STAGE_WARMING: LoadStage
LOAD_STAGE_SERVING: LoadStage

class ModelOptions(_message.Message):
    __slots__ = ("dtype", "kv_bits", "draft_model", "context_length")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    KV_BITS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    kv_bits: int
    draft_model: str
    context_length: int
    def __init__(self, dtype: _Optional[str] = ..., kv_bits: _Optional[int] = ..., draft_model: _Optional[str] = ..., context_length: _Optional[int] = ...) -> None: ...

class LoadModelRequest(_message.Message):
    __slots__ = ("name", "source", "kind", "options", "keep_alive_seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    source: str
    kind: _model_pb2.ModelKind
    options: ModelOptions
    keep_alive_seconds: float
    def __init__(self, name: _Optional[str] = ..., source: _Optional[str] = ..., kind: _Optional[_Union[_model_pb2.ModelKind, str]] = ..., options: _Optional[_Union[ModelOptions, _Mapping]] = ..., keep_alive_seconds: _Optional[float] = ...) -> None: ...

class LoadModelResponse(_message.Message):
    __slots__ = ("stage", "done", "total", "evicted", "model", "elapsed_seconds")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    stage: LoadStage
    done: int
    total: int
    evicted: _containers.RepeatedScalarFieldContainer[str]
    model: _model_pb2.ModelInfo
    elapsed_seconds: float
    def __init__(self, stage: _Optional[_Union[LoadStage, str]] = ..., done: _Optional[int] = ..., total: _Optional[int] = ..., evicted: _Optional[_Iterable[str]] = ..., model: _Optional[_Union[_model_pb2.ModelInfo, _Mapping]] = ..., elapsed_seconds: _Optional[float] = ...) -> None: ...

class UnloadModelRequest(_message.Message):
    __slots__ = ("name", "cancel_requests")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    cancel_requests: bool
    def __init__(self, name: _Optional[str] = ..., cancel_requests: _Optional[bool] = ...) -> None: ...

class UnloadModelResponse(_message.Message):
    __slots__ = ("name", "freed_bytes", "state")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FREED_BYTES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    name: str
    freed_bytes: int
    state: ModelState
    def __init__(self, name: _Optional[str] = ..., freed_bytes: _Optional[int] = ..., state: _Optional[_Union[ModelState, str]] = ...) -> None: ...

class ModelStatus(_message.Message):
    __slots__ = ("name", "kind", "state", "on_demand", "pinned", "keep_alive_seconds", "aliases", "resident_bytes", "idle_seconds", "requests", "load_seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ON_DEMAND_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    LOAD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: _model_pb2.ModelKind
    state: ModelState
    on_demand: bool
    pinned: bool
    keep_alive_seconds: float
    aliases: _containers.RepeatedScalarFieldContainer[str]
    resident_bytes: int
    idle_seconds: float
    requests: int
    load_seconds: float
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[_model_pb2.ModelKind, str]] = ..., state: _Optional[_Union[ModelState, str]] = ..., on_demand: _Optional[bool] = ..., pinned: _Optional[bool] = ..., keep_alive_seconds: _Optional[float] = ..., aliases: _Optional[_Iterable[str]] = ..., resident_bytes: _Optional[int] = ..., idle_seconds: _Optional[float] = ..., requests: _Optional[int] = ..., load_seconds: _Optional[float] = ...) -> None: ...
