from mlxgrpc_client.gen.mlxgrpc.v1 import generation_pb2 as _generation_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GraphMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GRAPH_METHOD_UNSPECIFIED: _ClassVar[GraphMethod]
    GRAPH_METHOD_AUTOREGRESSIVE: _ClassVar[GraphMethod]
    GRAPH_METHOD_DENOISING: _ClassVar[GraphMethod]

class MediaInput(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEDIA_INPUT_UNSPECIFIED: _ClassVar[MediaInput]
    MEDIA_INPUT_EMBEDDINGS: _ClassVar[MediaInput]
    MEDIA_INPUT_EMBEDDINGS_POSITIONS: _ClassVar[MediaInput]
    MEDIA_INPUT_PIXELS: _ClassVar[MediaInput]

class ResponseFormatKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESPONSE_FORMAT_KIND_UNSPECIFIED: _ClassVar[ResponseFormatKind]
    RESPONSE_FORMAT_KIND_JSON_SCHEMA: _ClassVar[ResponseFormatKind]
    RESPONSE_FORMAT_KIND_JSON_OBJECT: _ClassVar[ResponseFormatKind]
    RESPONSE_FORMAT_KIND_REGEX: _ClassVar[ResponseFormatKind]
    RESPONSE_FORMAT_KIND_GRAMMAR: _ClassVar[ResponseFormatKind]
    RESPONSE_FORMAT_KIND_CHOICE: _ClassVar[ResponseFormatKind]

class ModelKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_KIND_UNSPECIFIED: _ClassVar[ModelKind]
    MODEL_KIND_GENERATION: _ClassVar[ModelKind]
    MODEL_KIND_EMBEDDING: _ClassVar[ModelKind]
    MODEL_KIND_SPEECH: _ClassVar[ModelKind]

class AdapterKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADAPTER_KIND_UNSPECIFIED: _ClassVar[AdapterKind]
    ADAPTER_KIND_LORA: _ClassVar[AdapterKind]
    ADAPTER_KIND_DORA: _ClassVar[AdapterKind]
GRAPH_METHOD_UNSPECIFIED: GraphMethod
GRAPH_METHOD_AUTOREGRESSIVE: GraphMethod
GRAPH_METHOD_DENOISING: GraphMethod
MEDIA_INPUT_UNSPECIFIED: MediaInput
MEDIA_INPUT_EMBEDDINGS: MediaInput
MEDIA_INPUT_EMBEDDINGS_POSITIONS: MediaInput
MEDIA_INPUT_PIXELS: MediaInput
RESPONSE_FORMAT_KIND_UNSPECIFIED: ResponseFormatKind
RESPONSE_FORMAT_KIND_JSON_SCHEMA: ResponseFormatKind
RESPONSE_FORMAT_KIND_JSON_OBJECT: ResponseFormatKind
RESPONSE_FORMAT_KIND_REGEX: ResponseFormatKind
RESPONSE_FORMAT_KIND_GRAMMAR: ResponseFormatKind
RESPONSE_FORMAT_KIND_CHOICE: ResponseFormatKind
MODEL_KIND_UNSPECIFIED: ModelKind
MODEL_KIND_GENERATION: ModelKind
MODEL_KIND_EMBEDDING: ModelKind
MODEL_KIND_SPEECH: ModelKind
ADAPTER_KIND_UNSPECIFIED: AdapterKind
ADAPTER_KIND_LORA: AdapterKind
ADAPTER_KIND_DORA: AdapterKind

class GraphDescriptor(_message.Message):
    __slots__ = ("id", "backend", "graph_abi", "state_abi", "artifact")
    ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ABI_FIELD_NUMBER: _ClassVar[int]
    STATE_ABI_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    id: str
    backend: str
    graph_abi: str
    state_abi: str
    artifact: str
    def __init__(self, id: _Optional[str] = ..., backend: _Optional[str] = ..., graph_abi: _Optional[str] = ..., state_abi: _Optional[str] = ..., artifact: _Optional[str] = ...) -> None: ...

class MediaSupport(_message.Message):
    __slots__ = ("input", "video", "audio")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    VIDEO_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    input: MediaInput
    video: bool
    audio: bool
    def __init__(self, input: _Optional[_Union[MediaInput, str]] = ..., video: _Optional[bool] = ..., audio: _Optional[bool] = ...) -> None: ...

class NativeDraft(_message.Message):
    __slots__ = ("kind", "num_draft_tokens")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    num_draft_tokens: int
    def __init__(self, kind: _Optional[str] = ..., num_draft_tokens: _Optional[int] = ...) -> None: ...

class PrefillCapabilities(_message.Message):
    __slots__ = ("bounded_workspace",)
    BOUNDED_WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    bounded_workspace: bool
    def __init__(self, bounded_workspace: _Optional[bool] = ...) -> None: ...

class SpeculationCapabilities(_message.Message):
    __slots__ = ("adapters", "logprobs", "external_tokens", "grammar_proposals", "modes", "default_mode", "draft_model")
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_PROPOSALS_FIELD_NUMBER: _ClassVar[int]
    MODES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_MODE_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MODEL_FIELD_NUMBER: _ClassVar[int]
    adapters: bool
    logprobs: bool
    external_tokens: bool
    grammar_proposals: bool
    modes: _containers.RepeatedScalarFieldContainer[_generation_pb2.SpeculationMode]
    default_mode: _generation_pb2.SpeculationMode
    draft_model: str
    def __init__(self, adapters: _Optional[bool] = ..., logprobs: _Optional[bool] = ..., external_tokens: _Optional[bool] = ..., grammar_proposals: _Optional[bool] = ..., modes: _Optional[_Iterable[_Union[_generation_pb2.SpeculationMode, str]]] = ..., default_mode: _Optional[_Union[_generation_pb2.SpeculationMode, str]] = ..., draft_model: _Optional[str] = ...) -> None: ...

class GraphCapabilities(_message.Message):
    __slots__ = ("method", "media", "compiled_decode", "sparse_attention", "embeddings", "hidden_layer_taps", "native_draft", "prefill", "speculation", "generation", "response_formats", "chat", "rerank", "classify", "sparse_embeddings", "transcription")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    MEDIA_FIELD_NUMBER: _ClassVar[int]
    COMPILED_DECODE_FIELD_NUMBER: _ClassVar[int]
    SPARSE_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_LAYER_TAPS_FIELD_NUMBER: _ClassVar[int]
    NATIVE_DRAFT_FIELD_NUMBER: _ClassVar[int]
    PREFILL_FIELD_NUMBER: _ClassVar[int]
    SPECULATION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMATS_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    RERANK_FIELD_NUMBER: _ClassVar[int]
    CLASSIFY_FIELD_NUMBER: _ClassVar[int]
    SPARSE_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    method: GraphMethod
    media: MediaSupport
    compiled_decode: bool
    sparse_attention: bool
    embeddings: bool
    hidden_layer_taps: bool
    native_draft: NativeDraft
    prefill: PrefillCapabilities
    speculation: SpeculationCapabilities
    generation: bool
    response_formats: _containers.RepeatedScalarFieldContainer[ResponseFormatKind]
    chat: ChatCapabilities
    rerank: bool
    classify: bool
    sparse_embeddings: bool
    transcription: bool
    def __init__(self, method: _Optional[_Union[GraphMethod, str]] = ..., media: _Optional[_Union[MediaSupport, _Mapping]] = ..., compiled_decode: _Optional[bool] = ..., sparse_attention: _Optional[bool] = ..., embeddings: _Optional[bool] = ..., hidden_layer_taps: _Optional[bool] = ..., native_draft: _Optional[_Union[NativeDraft, _Mapping]] = ..., prefill: _Optional[_Union[PrefillCapabilities, _Mapping]] = ..., speculation: _Optional[_Union[SpeculationCapabilities, _Mapping]] = ..., generation: _Optional[bool] = ..., response_formats: _Optional[_Iterable[_Union[ResponseFormatKind, str]]] = ..., chat: _Optional[_Union[ChatCapabilities, _Mapping]] = ..., rerank: _Optional[bool] = ..., classify: _Optional[bool] = ..., sparse_embeddings: _Optional[bool] = ..., transcription: _Optional[bool] = ...) -> None: ...

class ChatCapabilities(_message.Message):
    __slots__ = ("tool_calling", "tool_parser", "tool_call_start", "tool_call_end", "tool_choice_enforced", "reasoning_start", "reasoning_end")
    TOOL_CALLING_FIELD_NUMBER: _ClassVar[int]
    TOOL_PARSER_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_START_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_END_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_ENFORCED_FIELD_NUMBER: _ClassVar[int]
    REASONING_START_FIELD_NUMBER: _ClassVar[int]
    REASONING_END_FIELD_NUMBER: _ClassVar[int]
    tool_calling: bool
    tool_parser: str
    tool_call_start: str
    tool_call_end: str
    tool_choice_enforced: bool
    reasoning_start: str
    reasoning_end: str
    def __init__(self, tool_calling: _Optional[bool] = ..., tool_parser: _Optional[str] = ..., tool_call_start: _Optional[str] = ..., tool_call_end: _Optional[str] = ..., tool_choice_enforced: _Optional[bool] = ..., reasoning_start: _Optional[str] = ..., reasoning_end: _Optional[str] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "kind", "graph", "capabilities", "context_length", "vocab_size", "eos_token_ids", "has_chat_template", "dtype", "blas", "embedding_dimensions", "source", "adapters", "max_adapters", "kv_cache_dtype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    HAS_CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    BLAS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    MAX_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_DTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: ModelKind
    graph: GraphDescriptor
    capabilities: GraphCapabilities
    context_length: int
    vocab_size: int
    eos_token_ids: _containers.RepeatedScalarFieldContainer[int]
    has_chat_template: bool
    dtype: str
    blas: str
    embedding_dimensions: int
    source: str
    adapters: _containers.RepeatedCompositeFieldContainer[AdapterInfo]
    max_adapters: int
    kv_cache_dtype: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[ModelKind, str]] = ..., graph: _Optional[_Union[GraphDescriptor, _Mapping]] = ..., capabilities: _Optional[_Union[GraphCapabilities, _Mapping]] = ..., context_length: _Optional[int] = ..., vocab_size: _Optional[int] = ..., eos_token_ids: _Optional[_Iterable[int]] = ..., has_chat_template: _Optional[bool] = ..., dtype: _Optional[str] = ..., blas: _Optional[str] = ..., embedding_dimensions: _Optional[int] = ..., source: _Optional[str] = ..., adapters: _Optional[_Iterable[_Union[AdapterInfo, _Mapping]]] = ..., max_adapters: _Optional[int] = ..., kv_cache_dtype: _Optional[str] = ...) -> None: ...

class AdapterInfo(_message.Message):
    __slots__ = ("name", "kind", "rank", "scale", "layers", "bytes", "source", "active_requests", "unloading")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    UNLOADING_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: AdapterKind
    rank: int
    scale: float
    layers: int
    bytes: int
    source: str
    active_requests: int
    unloading: bool
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[AdapterKind, str]] = ..., rank: _Optional[int] = ..., scale: _Optional[float] = ..., layers: _Optional[int] = ..., bytes: _Optional[int] = ..., source: _Optional[str] = ..., active_requests: _Optional[int] = ..., unloading: _Optional[bool] = ...) -> None: ...

class MemoryPlan(_message.Message):
    __slots__ = ("schema_version", "strategy", "fits", "context_tokens", "max_safe_context", "weights_bytes", "kv_bytes", "transient_bytes", "reserve_bytes", "total_bytes", "usable_bytes", "predicted_decode_tps", "allocator_limit_bytes", "max_generation_tokens", "streamed_weights", "machine_headroom_bytes", "adapter_bytes")
    class StreamedWeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    FITS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_SAFE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_BYTES_FIELD_NUMBER: _ClassVar[int]
    KV_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRANSIENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESERVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    USABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_DECODE_TPS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATOR_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_GENERATION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STREAMED_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    MACHINE_HEADROOM_BYTES_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_BYTES_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    strategy: str
    fits: bool
    context_tokens: int
    max_safe_context: int
    weights_bytes: int
    kv_bytes: int
    transient_bytes: int
    reserve_bytes: int
    total_bytes: int
    usable_bytes: int
    predicted_decode_tps: float
    allocator_limit_bytes: int
    max_generation_tokens: int
    streamed_weights: _containers.ScalarMap[str, int]
    machine_headroom_bytes: int
    adapter_bytes: int
    def __init__(self, schema_version: _Optional[int] = ..., strategy: _Optional[str] = ..., fits: _Optional[bool] = ..., context_tokens: _Optional[int] = ..., max_safe_context: _Optional[int] = ..., weights_bytes: _Optional[int] = ..., kv_bytes: _Optional[int] = ..., transient_bytes: _Optional[int] = ..., reserve_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ..., usable_bytes: _Optional[int] = ..., predicted_decode_tps: _Optional[float] = ..., allocator_limit_bytes: _Optional[int] = ..., max_generation_tokens: _Optional[int] = ..., streamed_weights: _Optional[_Mapping[str, int]] = ..., machine_headroom_bytes: _Optional[int] = ..., adapter_bytes: _Optional[int] = ...) -> None: ...
