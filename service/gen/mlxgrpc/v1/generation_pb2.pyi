from service.gen.mlxgrpc.v1 import speech_pb2 as _speech_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CHOICE_MODE_UNSPECIFIED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_AUTO: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NONE: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_REQUIRED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_FUNCTION: _ClassVar[ToolChoiceMode]

class SamplerOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SAMPLER_ORDER_UNSPECIFIED: _ClassVar[SamplerOrder]
    SAMPLER_ORDER_DEFAULT: _ClassVar[SamplerOrder]
    SAMPLER_ORDER_LLAMA_CPP: _ClassVar[SamplerOrder]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_EOS: _ClassVar[FinishReason]
    FINISH_REASON_CANCELLED: _ClassVar[FinishReason]
    FINISH_REASON_ERROR: _ClassVar[FinishReason]
    FINISH_REASON_TOOL_CALLS: _ClassVar[FinishReason]

class SpeculationMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPECULATION_MODE_UNSPECIFIED: _ClassVar[SpeculationMode]
    SPECULATION_MODE_OFF: _ClassVar[SpeculationMode]
    SPECULATION_MODE_NGRAM: _ClassVar[SpeculationMode]
    SPECULATION_MODE_DRAFT: _ClassVar[SpeculationMode]
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
TOOL_CHOICE_MODE_FUNCTION: ToolChoiceMode
SAMPLER_ORDER_UNSPECIFIED: SamplerOrder
SAMPLER_ORDER_DEFAULT: SamplerOrder
SAMPLER_ORDER_LLAMA_CPP: SamplerOrder
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_EOS: FinishReason
FINISH_REASON_CANCELLED: FinishReason
FINISH_REASON_ERROR: FinishReason
FINISH_REASON_TOOL_CALLS: FinishReason
SPECULATION_MODE_UNSPECIFIED: SpeculationMode
SPECULATION_MODE_OFF: SpeculationMode
SPECULATION_MODE_NGRAM: SpeculationMode
SPECULATION_MODE_DRAFT: SpeculationMode

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "parts", "tool_calls", "tool_call_id", "reasoning")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    parts: _containers.RepeatedCompositeFieldContainer[ContentPart]
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    reasoning: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., reasoning: _Optional[str] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("text", "image", "video", "audio")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    VIDEO_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: Image
    video: Video
    audio: _speech_pb2.Audio
    def __init__(self, text: _Optional[str] = ..., image: _Optional[_Union[Image, _Mapping]] = ..., video: _Optional[_Union[Video, _Mapping]] = ..., audio: _Optional[_Union[_speech_pb2.Audio, _Mapping]] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("data", "media_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    media_type: str
    def __init__(self, data: _Optional[bytes] = ..., media_type: _Optional[str] = ...) -> None: ...

class Video(_message.Message):
    __slots__ = ("data", "media_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    media_type: str
    def __init__(self, data: _Optional[bytes] = ..., media_type: _Optional[str] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "parameters_json_schema")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json_schema: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json_schema: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments_json: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ("index", "id", "name", "arguments_json")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    arguments_json: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "function_name")
    MODE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    function_name: str
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., function_name: _Optional[str] = ...) -> None: ...

class ChatMessages(_message.Message):
    __slots__ = ("messages", "tools", "tool_choice", "parallel_tool_calls", "enable_thinking", "template_kwargs")
    class TemplateKwargsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_THINKING_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    tool_choice: ToolChoice
    parallel_tool_calls: bool
    enable_thinking: bool
    template_kwargs: _containers.ScalarMap[str, str]
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., parallel_tool_calls: _Optional[bool] = ..., enable_thinking: _Optional[bool] = ..., template_kwargs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "repetition_context_size", "presence_penalty", "frequency_penalty", "logit_bias", "seed", "typical_p", "top_n_sigma", "xtc", "dry", "mirostat", "dynamic_temperature", "sampler_order", "bad_words", "allowed_token_ids")
    class LogitBiasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_CONTEXT_SIZE_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TYPICAL_P_FIELD_NUMBER: _ClassVar[int]
    TOP_N_SIGMA_FIELD_NUMBER: _ClassVar[int]
    XTC_FIELD_NUMBER: _ClassVar[int]
    DRY_FIELD_NUMBER: _ClassVar[int]
    MIROSTAT_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_ORDER_FIELD_NUMBER: _ClassVar[int]
    BAD_WORDS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    repetition_context_size: int
    presence_penalty: float
    frequency_penalty: float
    logit_bias: _containers.ScalarMap[int, float]
    seed: int
    typical_p: float
    top_n_sigma: float
    xtc: XtcParams
    dry: DryParams
    mirostat: MirostatParams
    dynamic_temperature: DynamicTemperature
    sampler_order: SamplerOrder
    bad_words: _containers.RepeatedScalarFieldContainer[str]
    allowed_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., repetition_context_size: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., logit_bias: _Optional[_Mapping[int, float]] = ..., seed: _Optional[int] = ..., typical_p: _Optional[float] = ..., top_n_sigma: _Optional[float] = ..., xtc: _Optional[_Union[XtcParams, _Mapping]] = ..., dry: _Optional[_Union[DryParams, _Mapping]] = ..., mirostat: _Optional[_Union[MirostatParams, _Mapping]] = ..., dynamic_temperature: _Optional[_Union[DynamicTemperature, _Mapping]] = ..., sampler_order: _Optional[_Union[SamplerOrder, str]] = ..., bad_words: _Optional[_Iterable[str]] = ..., allowed_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class XtcParams(_message.Message):
    __slots__ = ("probability", "threshold")
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    probability: float
    threshold: float
    def __init__(self, probability: _Optional[float] = ..., threshold: _Optional[float] = ...) -> None: ...

class DryParams(_message.Message):
    __slots__ = ("multiplier", "base", "allowed_length", "penalty_last_n", "sequence_breakers", "use_no_breakers")
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_LENGTH_FIELD_NUMBER: _ClassVar[int]
    PENALTY_LAST_N_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_BREAKERS_FIELD_NUMBER: _ClassVar[int]
    USE_NO_BREAKERS_FIELD_NUMBER: _ClassVar[int]
    multiplier: float
    base: float
    allowed_length: int
    penalty_last_n: int
    sequence_breakers: _containers.RepeatedScalarFieldContainer[str]
    use_no_breakers: bool
    def __init__(self, multiplier: _Optional[float] = ..., base: _Optional[float] = ..., allowed_length: _Optional[int] = ..., penalty_last_n: _Optional[int] = ..., sequence_breakers: _Optional[_Iterable[str]] = ..., use_no_breakers: _Optional[bool] = ...) -> None: ...

class MirostatParams(_message.Message):
    __slots__ = ("tau", "eta")
    TAU_FIELD_NUMBER: _ClassVar[int]
    ETA_FIELD_NUMBER: _ClassVar[int]
    tau: float
    eta: float
    def __init__(self, tau: _Optional[float] = ..., eta: _Optional[float] = ...) -> None: ...

class DynamicTemperature(_message.Message):
    __slots__ = ("range", "exponent")
    RANGE_FIELD_NUMBER: _ClassVar[int]
    EXPONENT_FIELD_NUMBER: _ClassVar[int]
    range: float
    exponent: float
    def __init__(self, range: _Optional[float] = ..., exponent: _Optional[float] = ...) -> None: ...

class StoppingCriteria(_message.Message):
    __slots__ = ("max_tokens", "min_tokens", "stop", "stop_token_ids", "ignore_eos")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    min_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    def __init__(self, max_tokens: _Optional[int] = ..., min_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: _Optional[bool] = ...) -> None: ...

class ResponseFormat(_message.Message):
    __slots__ = ("json_schema", "json_object", "regex", "grammar", "choice")
    class Choice(_message.Message):
        __slots__ = ("options",)
        OPTIONS_FIELD_NUMBER: _ClassVar[int]
        options: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, options: _Optional[_Iterable[str]] = ...) -> None: ...
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    JSON_OBJECT_FIELD_NUMBER: _ClassVar[int]
    REGEX_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    json_schema: str
    json_object: bool
    regex: str
    grammar: str
    choice: ResponseFormat.Choice
    def __init__(self, json_schema: _Optional[str] = ..., json_object: _Optional[bool] = ..., regex: _Optional[str] = ..., grammar: _Optional[str] = ..., choice: _Optional[_Union[ResponseFormat.Choice, _Mapping]] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ("token_id", "logprob", "text")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    text: str
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., text: _Optional[str] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "logprob", "top_logprobs")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "cached_tokens", "draft_tokens", "accepted_draft_tokens", "accepted_prediction_tokens", "rejected_prediction_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_PREDICTION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_PREDICTION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    draft_tokens: int
    accepted_draft_tokens: int
    accepted_prediction_tokens: int
    rejected_prediction_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., draft_tokens: _Optional[int] = ..., accepted_draft_tokens: _Optional[int] = ..., accepted_prediction_tokens: _Optional[int] = ..., rejected_prediction_tokens: _Optional[int] = ...) -> None: ...

class SpeculationOptions(_message.Message):
    __slots__ = ("mode", "num_draft_tokens")
    MODE_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    mode: SpeculationMode
    num_draft_tokens: int
    def __init__(self, mode: _Optional[_Union[SpeculationMode, str]] = ..., num_draft_tokens: _Optional[int] = ...) -> None: ...

class Prediction(_message.Message):
    __slots__ = ("text", "tokens")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    text: str
    tokens: TokenIds
    def __init__(self, text: _Optional[str] = ..., tokens: _Optional[_Union[TokenIds, _Mapping]] = ...) -> None: ...

class Timings(_message.Message):
    __slots__ = ("queue_seconds", "time_to_first_token_seconds", "decode_tokens_per_second", "total_seconds")
    QUEUE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_TOKEN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DECODE_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    queue_seconds: float
    time_to_first_token_seconds: float
    decode_tokens_per_second: float
    total_seconds: float
    def __init__(self, queue_seconds: _Optional[float] = ..., time_to_first_token_seconds: _Optional[float] = ..., decode_tokens_per_second: _Optional[float] = ..., total_seconds: _Optional[float] = ...) -> None: ...
