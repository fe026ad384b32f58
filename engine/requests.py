"""Plain request types of the engine's API (no protobuf, no tensors); the pooling tasks' types
(Embed, Rerank, Classify, EmbedSparse) live in ``pooling_requests`` and are named here too."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

from .pooling_requests import (  # noqa: F401 - re-exported: the engine's request types in one module
    Classification,
    ClassifyRequest,
    EmbeddingRequest,
    EmbedSparseRequest,
    LabelScore,
    RerankRequest,
    RerankScore,
    SparseEmbedding,
)
from .speech.types import AudioInput as AudioPart  # an audio file in a chat prompt, as Transcribe's
from .tenancy import ANONYMOUS, Tenant


@dataclass(frozen=True)
class ToolCall:
    """A call of a tool: ``arguments`` is a JSON object as text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class TextPart:

    text: str


@dataclass(frozen=True)
class ImagePart:
    """An encoded image (PNG, JPEG, WebP or GIF) as the client sent it."""

    data: bytes
    media_type: str


@dataclass(frozen=True)
class VideoPart:
    """An encoded video (MP4, QuickTime, WebM, Matroska or AVI) as the client sent it."""

    data: bytes
    media_type: str


MediaPart = Union[ImagePart, VideoPart, AudioPart]
Part = Union[TextPart, ImagePart, VideoPart, AudioPart]


@dataclass(frozen=True)
class ChatMessage:
    """``content`` is the message's text; ``parts``, when set, the same text with images
    videos and audio in their order (``content`` then joins the text parts)."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's calls
    tool_call_id: str = ""  # a "tool" message: the call it answers
    reasoning: str = ""  # an assistant's earlier thinking
    parts: tuple[Part, ...] = ()

    @property
    def images(self) -> tuple[ImagePart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ImagePart))

    @property
    def media(self) -> tuple[MediaPart, ...]:
        """Images, videos and audio, in order."""
        return tuple(p for p in self.parts if isinstance(p, (ImagePart, VideoPart, AudioPart)))


@dataclass(frozen=True)
class Tool:
    """A function the model may call; ``parameters`` is a JSON Schema as text ("" for none)."""

    name: str
    description: str = ""
    parameters: str = ""


class ToolChoiceMode(enum.Enum):
    AUTO = "auto"
    NONE = "none"
    REQUIRED = "required"
    FUNCTION = "function"  # the one named ``ChatPrompt.function``


@dataclass(frozen=True)
class TextPrompt:
    """Raw text, tokenized with special tokens added."""

    text: str


@dataclass(frozen=True)
class TokenPrompt:

    ids: tuple[int, ...]


@dataclass(frozen=True)
class ChatPrompt:
    """Messages (and tools) rendered with the chat template plus the generation prompt;
    ``template_kwargs`` values are parsed JSON."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoiceMode = ToolChoiceMode.AUTO
    function: str = ""  # with ToolChoiceMode.FUNCTION
    parallel_tool_calls: bool = True
    enable_thinking: bool | None = None  # None: the template's default
    template_kwargs: Mapping[str, object] = field(default_factory=dict)

    @property
    def has_media(self) -> bool:
        """Any image, video or audio part."""
        return any(m.media for m in self.messages)

    @property
    def has_videos(self) -> bool:
        return any(isinstance(p, VideoPart) for m in self.messages for p in m.parts)

    @property
    def has_audio(self) -> bool:
        return any(isinstance(p, AudioPart) for m in self.messages for p in m.parts)


Prompt = Union[TextPrompt, TokenPrompt, ChatPrompt]


class SamplerOrder(enum.Enum):
    DEFAULT = "default"  # temperature, top_k, min_p, top_p, typical_p, top_n_sigma, xtc
    LLAMA_CPP = "llama_cpp"  # top_n_sigma, top_k, typical_p, top_p, min_p, xtc, temperature


@dataclass(frozen=True)
class XtcOptions:
    probability: float = 0.0
    threshold: float = 0.1


DRY_BREAKERS = ("\n", ":", "\"", "*")  # llama.cpp's default sequence breakers


@dataclass(frozen=True)
class DryOptions:
    multiplier: float = 0.0
    base: float = 1.75
    allowed_length: int = 2
    penalty_last_n: int = 0  # 0: the whole context
    sequence_breakers: tuple[str, ...] = DRY_BREAKERS


@dataclass(frozen=True)
class MirostatOptions:
    tau: float = 5.0
    eta: float = 0.1


@dataclass(frozen=True)
class DynamicTemperature:
    range: float = 0.0
    exponent: float = 1.0


@dataclass(frozen=True)
class SamplingOptions:
    """How the next token is chosen; the defaults mean greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    repetition_context_size: int = 20
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    seed: int | None = None
    typical_p: float = 1.0  # 1: off
    top_n_sigma: float = 0.0  # 0: off
    xtc: XtcOptions | None = None
    dry: DryOptions | None = None
    mirostat: MirostatOptions | None = None  # v2; replaces the truncating samplers
    dynamic_temperature: DynamicTemperature | None = None
    order: SamplerOrder = SamplerOrder.DEFAULT
    bad_words: tuple[str, ...] = ()
    allowed_token_ids: tuple[int, ...] = ()  # empty: any token


@dataclass(frozen=True)
class StopOptions:
    """When generation ends. ``max_tokens=None`` means up to the context length."""

    max_tokens: int | None = None
    min_tokens: int = 0
    stop: Sequence[str] = ()
    stop_token_ids: Sequence[int] = ()
    ignore_eos: bool = False


class SpeculationMode(enum.Enum):
    DEFAULT = "default"
    OFF = "off"
    NGRAM = "ngram"  # prompt lookup: drafts copied from the sequence's own earlier tokens
    DRAFT = "draft"  # a draft model with the same tokenizer


@dataclass(frozen=True)
class SpeculationOptions:
    """Speculative decoding for one request. It never changes the output."""

    mode: SpeculationMode = SpeculationMode.DEFAULT
    num_draft_tokens: int = 0  # most drafts verified per step; 0: the server's default


@dataclass(frozen=True)
class Prediction:
    """What the output is expected to mostly repeat: ``text`` (tokenized without special
    tokens) or ``token_ids``. Its tokens are drafts; it never changes the output."""

    text: str | None = None
    token_ids: tuple[int, ...] = ()


class FormatKind(enum.Enum):

    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"
    REGEX = "regex"
    GRAMMAR = "grammar"  # Lark syntax as llguidance reads it
    CHOICE = "choice"


@dataclass(frozen=True)
class ResponseFormat:
    """Structured output: text matching ``text`` (schema, regex, grammar), any JSON object, or one of ``options``."""

    kind: FormatKind
    text: str = ""
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class GenerationRequest:
    prompt: Prompt
    request_id: str = ""
    model: str = ""
    session_id: str = ""
    sampling: SamplingOptions = SamplingOptions()
    stopping: StopOptions = StopOptions()
    logprobs: bool = False
    top_logprobs: int = 0
    bypass_prefix_cache: bool = False
    speculation: SpeculationOptions = SpeculationOptions()
    response_format: ResponseFormat | None = None
    adapter: str = ""  # a loaded adapter's name; "" for the base model
    tenant: Tenant = ANONYMOUS  # who asked: scopes the id, the prefix cache and the fair share
    priority: int = 0  # higher starts first among waiting requests (aged, so none starves)
    n: int = 1  # choices sharing one prompt prefill; choice i of a seeded request is seeded seed + i
    prompt_logprobs: int | None = None  # None: none; k: every prompt token's and k alternatives
    prediction: Prediction | None = None  # drafts from the expected output
