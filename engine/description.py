"""What a served model is and what the engine does with it; each flag states what it actually does."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .adapters.info import AdapterInfo
from .requests import SpeculationMode


class ModelKind(enum.Enum):
    GENERATION = "generation"
    EMBEDDING = "embedding"
    SPEECH = "speech"


@dataclass(frozen=True)
class GraphDescriptor:
    id: str
    backend: str
    graph_abi: str
    state_abi: str
    artifact: str


@dataclass(frozen=True)
class Speculation:
    """What speculative verification covers for a model, and how requests may ask for it."""

    adapters: bool = False
    logprobs: bool = False
    external_tokens: bool = False
    grammar_proposals: bool = False
    modes: tuple[SpeculationMode, ...] = ()  # empty: the model does not speculate
    default_mode: SpeculationMode = SpeculationMode.OFF
    draft_model: str = ""


@dataclass(frozen=True)
class NativeDraft:
    """A draft head the model's own checkpoint carries and the server loaded."""

    kind: str  # "mtp"
    num_draft_tokens: int  # the most drafts one step chains


@dataclass(frozen=True)
class ChatFacts:
    """Tool calling and thinking as the tokenizer and template define them."""

    tool_calling: bool = False
    tool_parser: str = ""  # mlx-lm's parser module name
    tool_call_start: str = ""
    tool_call_end: str = ""
    tool_choice_enforced: bool = False  # the grammar can force a call
    reasoning_start: str = ""
    reasoning_end: str = ""


@dataclass(frozen=True)
class MediaSupport:
    """Media a model takes in its prompts: ``input`` says how ("embeddings": spliced into
    the ordinary forward)."""

    input: str = "embeddings"
    video: bool = False
    audio: bool = False


@dataclass(frozen=True)
class Capabilities:
    """GraphCapabilities, plus ``generation`` (the model generates text)."""

    method: str = "autoregressive"
    media: MediaSupport | None = None  # None: text only
    compiled_decode: bool = False
    sparse_attention: bool = False
    embeddings: bool = False
    hidden_layer_taps: bool = False
    native_draft: NativeDraft | None = None
    prefill_bounded_workspace: bool = False
    speculation: Speculation = field(default_factory=Speculation)
    generation: bool = True
    response_formats: tuple[str, ...] = ()  # structured-output formats Generate accepts ("json_schema", ...)
    chat: ChatFacts = field(default_factory=ChatFacts)
    rerank: bool = False  # the model scores query-document pairs (a cross-encoder)
    classify: bool = False  # the model scores labels for a text (a sequence classifier, rerankers included)
    sparse_embeddings: bool = False  # the model weighs the vocabulary for a text (a SPLADE model)
    transcription: bool = False  # the model turns speech into text (Transcribe)


@dataclass(frozen=True)
class ModelDescription:
    name: str
    kind: ModelKind
    descriptor: GraphDescriptor
    capabilities: Capabilities
    context_length: int
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    has_chat_template: bool
    dtype: str
    blas: str
    embedding_dimensions: int
    source: str
    adapters: tuple[AdapterInfo, ...] = ()  # loaded adapters
    max_adapters: int = 0  # adapters that may be loaded at once (0: none)
    kv_cache_dtype: str = ""  # how attention KV is held ("" for embedding models)
