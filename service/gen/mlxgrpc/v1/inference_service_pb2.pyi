from service.gen.mlxgrpc.v1 import generation_pb2 as _generation_pb2
from service.gen.mlxgrpc.v1 import lifecycle_pb2 as _lifecycle_pb2
from service.gen.mlxgrpc.v1 import model_pb2 as _model_pb2
from service.gen.mlxgrpc.v1 import speech_pb2 as _speech_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EmbeddingType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EMBEDDING_TYPE_UNSPECIFIED: _ClassVar[EmbeddingType]
    EMBEDDING_TYPE_FLOAT32: _ClassVar[EmbeddingType]
    EMBEDDING_TYPE_FLOAT16: _ClassVar[EmbeddingType]
    EMBEDDING_TYPE_INT8: _ClassVar[EmbeddingType]
    EMBEDDING_TYPE_UBINARY: _ClassVar[EmbeddingType]

class Truncation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRUNCATION_UNSPECIFIED: _ClassVar[Truncation]
    TRUNCATION_END: _ClassVar[Truncation]
    TRUNCATION_NONE: _ClassVar[Truncation]

class CacheTier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CACHE_TIER_UNSPECIFIED: _ClassVar[CacheTier]
    CACHE_TIER_MEMORY: _ClassVar[CacheTier]
    CACHE_TIER_DISK: _ClassVar[CacheTier]
EMBEDDING_TYPE_UNSPECIFIED: EmbeddingType
EMBEDDING_TYPE_FLOAT32: EmbeddingType
EMBEDDING_TYPE_FLOAT16: EmbeddingType
EMBEDDING_TYPE_INT8: EmbeddingType
EMBEDDING_TYPE_UBINARY: EmbeddingType
TRUNCATION_UNSPECIFIED: Truncation
TRUNCATION_END: Truncation
TRUNCATION_NONE: Truncation
CACHE_TIER_UNSPECIFIED: CacheTier
CACHE_TIER_MEMORY: CacheTier
CACHE_TIER_DISK: CacheTier

class GenerateRequest(_message.Message):
    __slots__ = ("model", "request_id", "session_id", "text", "tokens", "chat", "sampling", "stopping", "logprobs", "top_logprobs", "bypass_prefix_cache", "speculation", "response_format", "adapter", "priority", "n", "prompt_logprobs", "prediction", "keep_alive_seconds")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    STOPPING_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    BYPASS_PREFIX_CACHE_FIELD_NUMBER: _ClassVar[int]
    SPECULATION_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    model: str
    request_id: str
    session_id: str
    text: str
    tokens: _generation_pb2.TokenIds
    chat: _generation_pb2.ChatMessages
    sampling: _generation_pb2.SamplingParams
    stopping: _generation_pb2.StoppingCriteria
    logprobs: bool
    top_logprobs: int
    bypass_prefix_cache: bool
    speculation: _generation_pb2.SpeculationOptions
    response_format: _generation_pb2.ResponseFormat
    adapter: str
    priority: int
    n: int
    prompt_logprobs: int
    prediction: _generation_pb2.Prediction
    keep_alive_seconds: float
    def __init__(self, model: _Optional[str] = ..., request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., text: _Optional[str] = ..., tokens: _Optional[_Union[_generation_pb2.TokenIds, _Mapping]] = ..., chat: _Optional[_Union[_generation_pb2.ChatMessages, _Mapping]] = ..., sampling: _Optional[_Union[_generation_pb2.SamplingParams, _Mapping]] = ..., stopping: _Optional[_Union[_generation_pb2.StoppingCriteria, _Mapping]] = ..., logprobs: _Optional[bool] = ..., top_logprobs: _Optional[int] = ..., bypass_prefix_cache: _Optional[bool] = ..., speculation: _Optional[_Union[_generation_pb2.SpeculationOptions, _Mapping]] = ..., response_format: _Optional[_Union[_generation_pb2.ResponseFormat, _Mapping]] = ..., adapter: _Optional[str] = ..., priority: _Optional[int] = ..., n: _Optional[int] = ..., prompt_logprobs: _Optional[int] = ..., prediction: _Optional[_Union[_generation_pb2.Prediction, _Mapping]] = ..., keep_alive_seconds: _Optional[float] = ...) -> None: ...

class GenerationStarted(_message.Message):
    __slots__ = ("request_id", "model", "prompt_tokens", "cached_tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    prompt_tokens: int
    cached_tokens: int
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ...) -> None: ...

class TokenDelta(_message.Message):
    __slots__ = ("token_ids", "text", "logprobs", "reasoning", "tool_call_deltas", "tool_calls")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_DELTAS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    logprobs: _containers.RepeatedCompositeFieldContainer[_generation_pb2.TokenLogprob]
    reasoning: str
    tool_call_deltas: _containers.RepeatedCompositeFieldContainer[_generation_pb2.ToolCallDelta]
    tool_calls: _containers.RepeatedCompositeFieldContainer[_generation_pb2.ToolCall]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[_generation_pb2.TokenLogprob, _Mapping]]] = ..., reasoning: _Optional[str] = ..., tool_call_deltas: _Optional[_Iterable[_Union[_generation_pb2.ToolCallDelta, _Mapping]]] = ..., tool_calls: _Optional[_Iterable[_Union[_generation_pb2.ToolCall, _Mapping]]] = ...) -> None: ...

class GenerationFinished(_message.Message):
    __slots__ = ("reason", "stop_sequence", "stop_token_id", "usage", "timings")
    REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    reason: _generation_pb2.FinishReason
    stop_sequence: str
    stop_token_id: int
    usage: _generation_pb2.Usage
    timings: _generation_pb2.Timings
    def __init__(self, reason: _Optional[_Union[_generation_pb2.FinishReason, str]] = ..., stop_sequence: _Optional[str] = ..., stop_token_id: _Optional[int] = ..., usage: _Optional[_Union[_generation_pb2.Usage, _Mapping]] = ..., timings: _Optional[_Union[_generation_pb2.Timings, _Mapping]] = ...) -> None: ...

class PromptLogprobs(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[_generation_pb2.TokenLogprob]
    def __init__(self, tokens: _Optional[_Iterable[_Union[_generation_pb2.TokenLogprob, _Mapping]]] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("started", "delta", "finished", "prompt_logprobs", "choice_index")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    CHOICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    started: GenerationStarted
    delta: TokenDelta
    finished: GenerationFinished
    prompt_logprobs: PromptLogprobs
    choice_index: int
    def __init__(self, started: _Optional[_Union[GenerationStarted, _Mapping]] = ..., delta: _Optional[_Union[TokenDelta, _Mapping]] = ..., finished: _Optional[_Union[GenerationFinished, _Mapping]] = ..., prompt_logprobs: _Optional[_Union[PromptLogprobs, _Mapping]] = ..., choice_index: _Optional[int] = ...) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ("model", "inputs", "instruction", "normalize", "dimensions", "request_id", "priority", "keep_alive_seconds", "truncate", "packed", "embedding_type")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_TYPE_FIELD_NUMBER: _ClassVar[int]
    model: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    instruction: str
    normalize: bool
    dimensions: int
    request_id: str
    priority: int
    keep_alive_seconds: float
    truncate: Truncation
    packed: bool
    embedding_type: EmbeddingType
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., instruction: _Optional[str] = ..., normalize: _Optional[bool] = ..., dimensions: _Optional[int] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ..., keep_alive_seconds: _Optional[float] = ..., truncate: _Optional[_Union[Truncation, str]] = ..., packed: _Optional[bool] = ..., embedding_type: _Optional[_Union[EmbeddingType, str]] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("index", "embedding", "tokens", "packed")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    index: int
    embedding: _containers.RepeatedScalarFieldContainer[float]
    tokens: int
    packed: PackedEmbeddings
    def __init__(self, index: _Optional[int] = ..., embedding: _Optional[_Iterable[float]] = ..., tokens: _Optional[int] = ..., packed: _Optional[_Union[PackedEmbeddings, _Mapping]] = ...) -> None: ...

class PackedEmbeddings(_message.Message):
    __slots__ = ("indices", "tokens", "dimensions", "type", "data", "scales")
    INDICES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SCALES_FIELD_NUMBER: _ClassVar[int]
    indices: _containers.RepeatedScalarFieldContainer[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    dimensions: int
    type: EmbeddingType
    data: bytes
    scales: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, indices: _Optional[_Iterable[int]] = ..., tokens: _Optional[_Iterable[int]] = ..., dimensions: _Optional[int] = ..., type: _Optional[_Union[EmbeddingType, str]] = ..., data: _Optional[bytes] = ..., scales: _Optional[_Iterable[float]] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("model", "query", "documents", "top_n", "truncate", "request_id", "priority")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    model: str
    query: str
    documents: _containers.RepeatedScalarFieldContainer[str]
    top_n: int
    truncate: Truncation
    request_id: str
    priority: int
    def __init__(self, model: _Optional[str] = ..., query: _Optional[str] = ..., documents: _Optional[_Iterable[str]] = ..., top_n: _Optional[int] = ..., truncate: _Optional[_Union[Truncation, str]] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("model", "results")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    results: _containers.RepeatedCompositeFieldContainer[RerankResult]
    def __init__(self, model: _Optional[str] = ..., results: _Optional[_Iterable[_Union[RerankResult, _Mapping]]] = ...) -> None: ...

class RerankResult(_message.Message):
    __slots__ = ("index", "score", "tokens")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    index: int
    score: float
    tokens: int
    def __init__(self, index: _Optional[int] = ..., score: _Optional[float] = ..., tokens: _Optional[int] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("model", "inputs", "top_k", "truncate", "request_id", "priority")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    model: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    truncate: Truncation
    request_id: str
    priority: int
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., truncate: _Optional[_Union[Truncation, str]] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("model", "results")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    results: _containers.RepeatedCompositeFieldContainer[Classification]
    def __init__(self, model: _Optional[str] = ..., results: _Optional[_Iterable[_Union[Classification, _Mapping]]] = ...) -> None: ...

class Classification(_message.Message):
    __slots__ = ("index", "labels", "tokens")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    index: int
    labels: _containers.RepeatedCompositeFieldContainer[LabelScore]
    tokens: int
    def __init__(self, index: _Optional[int] = ..., labels: _Optional[_Iterable[_Union[LabelScore, _Mapping]]] = ..., tokens: _Optional[int] = ...) -> None: ...

class LabelScore(_message.Message):
    __slots__ = ("label", "score")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    label: str
    score: float
    def __init__(self, label: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class EmbedSparseRequest(_message.Message):
    __slots__ = ("model", "inputs", "top_k", "truncate", "request_id", "priority")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    model: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    truncate: Truncation
    request_id: str
    priority: int
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., truncate: _Optional[_Union[Truncation, str]] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class EmbedSparseResponse(_message.Message):
    __slots__ = ("model", "embeddings")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    model: str
    embeddings: _containers.RepeatedCompositeFieldContainer[SparseEmbedding]
    def __init__(self, model: _Optional[str] = ..., embeddings: _Optional[_Iterable[_Union[SparseEmbedding, _Mapping]]] = ...) -> None: ...

class SparseEmbedding(_message.Message):
    __slots__ = ("index", "token_ids", "weights", "tokens")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    weights: _containers.RepeatedScalarFieldContainer[float]
    tokens: int
    def __init__(self, index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., weights: _Optional[_Iterable[float]] = ..., tokens: _Optional[int] = ...) -> None: ...

class PrefetchRequest(_message.Message):
    __slots__ = ("model", "session_id", "text", "tokens", "chat", "adapter")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    model: str
    session_id: str
    text: str
    tokens: _generation_pb2.TokenIds
    chat: _generation_pb2.ChatMessages
    adapter: str
    def __init__(self, model: _Optional[str] = ..., session_id: _Optional[str] = ..., text: _Optional[str] = ..., tokens: _Optional[_Union[_generation_pb2.TokenIds, _Mapping]] = ..., chat: _Optional[_Union[_generation_pb2.ChatMessages, _Mapping]] = ..., adapter: _Optional[str] = ...) -> None: ...

class PrefetchResponse(_message.Message):
    __slots__ = ("prompt_tokens", "cached_tokens", "tier")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    cached_tokens: int
    tier: CacheTier
    def __init__(self, prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., tier: _Optional[_Union[CacheTier, str]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("model", "session_id")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    session_id: str
    def __init__(self, model: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: int
    def __init__(self, entries: _Optional[int] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    def __init__(self, cancelled: _Optional[bool] = ...) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class GetModelInfoResponse(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: _model_pb2.ModelInfo
    def __init__(self, info: _Optional[_Union[_model_pb2.ModelInfo, _Mapping]] = ...) -> None: ...

class PlanMemoryRequest(_message.Message):
    __slots__ = ("model", "context_tokens", "max_generation_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_GENERATION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    context_tokens: int
    max_generation_tokens: int
    def __init__(self, model: _Optional[str] = ..., context_tokens: _Optional[int] = ..., max_generation_tokens: _Optional[int] = ...) -> None: ...

class PlanMemoryResponse(_message.Message):
    __slots__ = ("plan",)
    PLAN_FIELD_NUMBER: _ClassVar[int]
    plan: _model_pb2.MemoryPlan
    def __init__(self, plan: _Optional[_Union[_model_pb2.MemoryPlan, _Mapping]] = ...) -> None: ...

class TokenizeRequest(_message.Message):
    __slots__ = ("model", "text", "add_special_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    text: str
    add_special_tokens: bool
    def __init__(self, model: _Optional[str] = ..., text: _Optional[str] = ..., add_special_tokens: _Optional[bool] = ...) -> None: ...

class TokenizeResponse(_message.Message):
    __slots__ = ("token_ids", "tokens")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    tokens: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., tokens: _Optional[_Iterable[str]] = ...) -> None: ...

class DetokenizeRequest(_message.Message):
    __slots__ = ("model", "token_ids", "skip_special_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    skip_special_tokens: bool
    def __init__(self, model: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., skip_special_tokens: _Optional[bool] = ...) -> None: ...

class DetokenizeResponse(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models", "statuses")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[_model_pb2.ModelInfo]
    statuses: _containers.RepeatedCompositeFieldContainer[_lifecycle_pb2.ModelStatus]
    def __init__(self, models: _Optional[_Iterable[_Union[_model_pb2.ModelInfo, _Mapping]]] = ..., statuses: _Optional[_Iterable[_Union[_lifecycle_pb2.ModelStatus, _Mapping]]] = ...) -> None: ...

class LoadAdapterRequest(_message.Message):
    __slots__ = ("model", "name", "path")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    model: str
    name: str
    path: str
    def __init__(self, model: _Optional[str] = ..., name: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class LoadAdapterResponse(_message.Message):
    __slots__ = ("adapter", "evicted")
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    adapter: _model_pb2.AdapterInfo
    evicted: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, adapter: _Optional[_Union[_model_pb2.AdapterInfo, _Mapping]] = ..., evicted: _Optional[_Iterable[str]] = ...) -> None: ...

class UnloadAdapterRequest(_message.Message):
    __slots__ = ("model", "name")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    model: str
    name: str
    def __init__(self, model: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class UnloadAdapterResponse(_message.Message):
    __slots__ = ("adapter",)
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    adapter: _model_pb2.AdapterInfo
    def __init__(self, adapter: _Optional[_Union[_model_pb2.AdapterInfo, _Mapping]] = ...) -> None: ...

class ListAdaptersRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class ListAdaptersResponse(_message.Message):
    __slots__ = ("model", "adapters", "max_adapters")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    MAX_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    model: str
    adapters: _containers.RepeatedCompositeFieldContainer[_model_pb2.AdapterInfo]
    max_adapters: int
    def __init__(self, model: _Optional[str] = ..., adapters: _Optional[_Iterable[_Union[_model_pb2.AdapterInfo, _Mapping]]] = ..., max_adapters: _Optional[int] = ...) -> None: ...

class GetLoadRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class GetLoadResponse(_message.Message):
    __slots__ = ("models", "uptime_seconds", "calls", "model_loads", "model_unloads")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    MODEL_LOADS_FIELD_NUMBER: _ClassVar[int]
    MODEL_UNLOADS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelLoad]
    uptime_seconds: float
    calls: CallLoad
    model_loads: int
    model_unloads: int
    def __init__(self, models: _Optional[_Iterable[_Union[ModelLoad, _Mapping]]] = ..., uptime_seconds: _Optional[float] = ..., calls: _Optional[_Union[CallLoad, _Mapping]] = ..., model_loads: _Optional[int] = ..., model_unloads: _Optional[int] = ...) -> None: ...

class CallLoad(_message.Message):
    __slots__ = ("open_rpcs", "max_concurrent_rpcs", "anonymous_streams", "max_anonymous_streams", "refused_rpcs", "refused_anonymous_streams", "tenants")
    OPEN_RPCS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_RPCS_FIELD_NUMBER: _ClassVar[int]
    ANONYMOUS_STREAMS_FIELD_NUMBER: _ClassVar[int]
    MAX_ANONYMOUS_STREAMS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_RPCS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_ANONYMOUS_STREAMS_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    open_rpcs: int
    max_concurrent_rpcs: int
    anonymous_streams: int
    max_anonymous_streams: int
    refused_rpcs: int
    refused_anonymous_streams: int
    tenants: _containers.RepeatedCompositeFieldContainer[TenantCalls]
    def __init__(self, open_rpcs: _Optional[int] = ..., max_concurrent_rpcs: _Optional[int] = ..., anonymous_streams: _Optional[int] = ..., max_anonymous_streams: _Optional[int] = ..., refused_rpcs: _Optional[int] = ..., refused_anonymous_streams: _Optional[int] = ..., tenants: _Optional[_Iterable[_Union[TenantCalls, _Mapping]]] = ...) -> None: ...

class TenantCalls(_message.Message):
    __slots__ = ("tenant", "open_streams", "max_streams", "refused_streams", "max_priority", "refused_priorities")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    OPEN_STREAMS_FIELD_NUMBER: _ClassVar[int]
    MAX_STREAMS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_STREAMS_FIELD_NUMBER: _ClassVar[int]
    MAX_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    REFUSED_PRIORITIES_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    open_streams: int
    max_streams: int
    refused_streams: int
    max_priority: int
    refused_priorities: int
    def __init__(self, tenant: _Optional[str] = ..., open_streams: _Optional[int] = ..., max_streams: _Optional[int] = ..., refused_streams: _Optional[int] = ..., max_priority: _Optional[int] = ..., refused_priorities: _Optional[int] = ...) -> None: ...

class ModelLoad(_message.Message):
    __slots__ = ("model", "running_requests", "waiting_requests", "max_running_requests", "kv_cache_bytes", "reserved_bytes", "memory_budget_bytes", "prefix_cache_entries", "prefix_cache_bytes", "prefix_cache_hits", "prefix_cache_misses", "prefix_cache_hit_rate", "generated_tokens_per_second", "generated_tokens", "tenants", "prefix_cache_memory_hits", "prefix_cache_disk_hits", "prefix_cache_disk_entries", "prefix_cache_disk_bytes", "prefix_cache_disk_writes", "prefix_cache_disk_evictions", "prefix_cache_disk_corrupt_files", "open_sessions", "prefix_cache_disk_dropped_writes", "resident_bytes")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_MISSES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_MEMORY_HITS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_DISK_HITS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_DISK_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_DISK_WRITES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_DISK_EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_DISK_CORRUPT_FILES_FIELD_NUMBER: _ClassVar[int]
    OPEN_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_DISK_DROPPED_WRITES_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    model: str
    running_requests: int
    waiting_requests: int
    max_running_requests: int
    kv_cache_bytes: int
    reserved_bytes: int
    memory_budget_bytes: int
    prefix_cache_entries: int
    prefix_cache_bytes: int
    prefix_cache_hits: int
    prefix_cache_misses: int
    prefix_cache_hit_rate: float
    generated_tokens_per_second: float
    generated_tokens: int
    tenants: _containers.RepeatedCompositeFieldContainer[TenantLoad]
    prefix_cache_memory_hits: int
    prefix_cache_disk_hits: int
    prefix_cache_disk_entries: int
    prefix_cache_disk_bytes: int
    prefix_cache_disk_writes: int
    prefix_cache_disk_evictions: int
    prefix_cache_disk_corrupt_files: int
    open_sessions: int
    prefix_cache_disk_dropped_writes: int
    resident_bytes: int
    def __init__(self, model: _Optional[str] = ..., running_requests: _Optional[int] = ..., waiting_requests: _Optional[int] = ..., max_running_requests: _Optional[int] = ..., kv_cache_bytes: _Optional[int] = ..., reserved_bytes: _Optional[int] = ..., memory_budget_bytes: _Optional[int] = ..., prefix_cache_entries: _Optional[int] = ..., prefix_cache_bytes: _Optional[int] = ..., prefix_cache_hits: _Optional[int] = ..., prefix_cache_misses: _Optional[int] = ..., prefix_cache_hit_rate: _Optional[float] = ..., generated_tokens_per_second: _Optional[float] = ..., generated_tokens: _Optional[int] = ..., tenants: _Optional[_Iterable[_Union[TenantLoad, _Mapping]]] = ..., prefix_cache_memory_hits: _Optional[int] = ..., prefix_cache_disk_hits: _Optional[int] = ..., prefix_cache_disk_entries: _Optional[int] = ..., prefix_cache_disk_bytes: _Optional[int] = ..., prefix_cache_disk_writes: _Optional[int] = ..., prefix_cache_disk_evictions: _Optional[int] = ..., prefix_cache_disk_corrupt_files: _Optional[int] = ..., open_sessions: _Optional[int] = ..., prefix_cache_disk_dropped_writes: _Optional[int] = ..., resident_bytes: _Optional[int] = ...) -> None: ...

class TenantLoad(_message.Message):
    __slots__ = ("tenant", "running_requests", "waiting_requests", "in_flight_requests", "tokens_last_minute", "generated_tokens", "refused_requests")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_LAST_MINUTE_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    running_requests: int
    waiting_requests: int
    in_flight_requests: int
    tokens_last_minute: int
    generated_tokens: int
    refused_requests: int
    def __init__(self, tenant: _Optional[str] = ..., running_requests: _Optional[int] = ..., waiting_requests: _Optional[int] = ..., in_flight_requests: _Optional[int] = ..., tokens_last_minute: _Optional[int] = ..., generated_tokens: _Optional[int] = ..., refused_requests: _Optional[int] = ...) -> None: ...
