"""What the blocking and the asyncio client share: channel credentials, request
building, stream bookkeeping and the google.rpc error details."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Union

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from . import pb
from ._embeddings import EmbeddingTypeArg
from ._embeddings import embedding_type as embedding_type_value

#: Marks "use the client's default deadline" (``None`` means no deadline).
DEFAULT: Any = object()

Prompt = Union[str, Sequence[int], "pb.TokenIds", Sequence[Any], "pb.ChatMessages", "pb.GenerateRequest"]
PrefetchPrompt = Union[str, Sequence[int], "pb.TokenIds", Sequence[Any], "pb.ChatMessages", "pb.PrefetchRequest"]


def channel_credentials(tls: bool, root_certificates: bytes | str | os.PathLike | None):
    """TLS credentials, or ``None`` for a plaintext channel.

    ``root_certificates`` is PEM bytes or the path of a CA file; setting it implies TLS.
    TLS without it verifies the server against the system roots.
    """
    if root_certificates is None and not tls:
        return None
    if isinstance(root_certificates, (str, os.PathLike)):
        with open(root_certificates, "rb") as f:
            root_certificates = f.read()
    return grpc.ssl_channel_credentials(root_certificates=root_certificates)


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


#: The range of GenerateRequest.priority, EmbedRequest.priority, RerankRequest.priority,
#: ClassifyRequest.priority, EmbedSparseRequest.priority and TranscribeRequest.priority.
MAX_PRIORITY = 100


def default_priority(priority: int) -> int:
    """Checks a client's default priority (per-request values are the server's to check)."""
    if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must be between {-MAX_PRIORITY} and {MAX_PRIORITY}, not {priority}")
    return priority


def _json_text(value: Any) -> str:
    """JSON text as it is; any other value serialized to JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _tool_call(call: pb.ToolCall | Mapping[str, Any]) -> pb.ToolCall:
    if isinstance(call, pb.ToolCall):
        return call
    fields = dict(call)
    if "arguments" in fields:
        fields["arguments_json"] = _json_text(fields.pop("arguments"))
    return pb.ToolCall(**fields)


def _message(m: pb.ChatMessage | Mapping[str, Any] | Sequence[str]) -> pb.ChatMessage:
    if isinstance(m, pb.ChatMessage):
        return m
    if isinstance(m, Mapping):
        fields = dict(m)
        if "tool_calls" in fields:
            fields["tool_calls"] = [_tool_call(c) for c in fields["tool_calls"]]
        if "parts" in fields:  # text as plain strings, media from image_part(), video_part(), audio_part()
            fields["parts"] = [pb.ContentPart(text=p) if isinstance(p, str) else p for p in fields["parts"]]
        return pb.ChatMessage(**fields)
    role, content = m  # a (role, content) pair
    return pb.ChatMessage(role=role, content=content)


def _chat(messages: Sequence[Any]) -> pb.ChatMessages:
    return pb.ChatMessages(messages=[_message(m) for m in messages])


def _tool(tool: pb.Tool | Mapping[str, Any]) -> pb.Tool:
    if isinstance(tool, pb.Tool):
        return tool
    fields = dict(tool)
    if "parameters" in fields:
        fields["parameters_json_schema"] = _json_text(fields.pop("parameters"))
    return pb.Tool(**fields)


def _tool_choice_mode(mode: str | int) -> int:
    if isinstance(mode, int):
        return mode
    name = mode.upper()
    try:
        return pb.ToolChoiceMode.Value(name if name.startswith("TOOL_CHOICE_MODE_") else f"TOOL_CHOICE_MODE_{name}")
    except ValueError:
        choices = ", ".join(n.removeprefix("TOOL_CHOICE_MODE_").lower() for n in pb.ToolChoiceMode.keys())
        raise ValueError(f"unknown tool choice {mode!r} (one of {choices}, "
                         "or {'function_name': NAME} for one function)") from None


def _tool_choice(value: str | int | pb.ToolChoice | Mapping[str, Any]) -> pb.ToolChoice:
    if isinstance(value, pb.ToolChoice):
        return value
    if isinstance(value, Mapping):
        fields = dict(value)
        if "mode" in fields:
            fields["mode"] = _tool_choice_mode(fields["mode"])
        elif fields.get("function_name"):
            fields["mode"] = pb.TOOL_CHOICE_MODE_FUNCTION
        return pb.ToolChoice(**fields)
    return pb.ToolChoice(mode=_tool_choice_mode(value))


def _prompt(prompt: Any) -> dict[str, Any]:
    """The ``prompt`` oneof field (``text``, ``tokens`` or ``chat``) of a text, token-id or chat prompt."""
    if isinstance(prompt, str):
        return {"text": prompt}
    if isinstance(prompt, pb.TokenIds):
        return {"tokens": prompt}
    if isinstance(prompt, pb.ChatMessages):
        return {"chat": prompt}
    if isinstance(prompt, Sequence) and all(isinstance(t, int) for t in prompt):
        return {"tokens": pb.TokenIds(ids=prompt)}
    if isinstance(prompt, Sequence):
        return {"chat": _chat(prompt)}
    raise TypeError(f"unsupported prompt type {type(prompt).__name__}")


def generate_request(
    prompt: Prompt,
    *,
    model: str = "",
    adapter: str = "",
    request_id: str = "",
    max_tokens: int | None = None,
    sampling: pb.SamplingParams | Mapping[str, Any] | None = None,
    stopping: pb.StoppingCriteria | Mapping[str, Any] | None = None,
    response_format: pb.ResponseFormat | Mapping[str, Any] | None = None,
    json_schema: Mapping[str, Any] | str | None = None,
    speculation: str | int | pb.SpeculationOptions | Mapping[str, Any] | None = None,
    num_draft_tokens: int | None = None,
    prediction: str | Sequence[int] | pb.TokenIds | pb.Prediction | None = None,
    priority: int | None = None,
    tools: Sequence[pb.Tool | Mapping[str, Any]] | None = None,
    tool_choice: str | int | pb.ToolChoice | Mapping[str, Any] | None = None,
    parallel_tool_calls: bool | None = None,
    enable_thinking: bool | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    keep_alive: float | None = None,
    **fields: Any,
) -> pb.GenerateRequest:
    """Builds a GenerateRequest.

    ``prompt`` is text (``str``), token ids (a sequence of ``int`` or ``pb.TokenIds``),
    chat messages (a sequence of ``pb.ChatMessage``, ``{"role", "content"}`` or ``{"role", "parts"}`` dicts or
    ``(role, content)`` pairs, or ``pb.ChatMessages``), or a whole ``pb.GenerateRequest``
    that the keyword arguments then override. ``sampling``/``stopping`` take the message
    or a dict of its fields; ``max_tokens`` is a shortcut for ``stopping.max_tokens``;
    ``adapter`` names a loaded LoRA/DoRA adapter of the model (empty: the base model);
    ``response_format`` (structured output) takes the message or a dict such as
    ``{"regex": "[0-9]+"}`` or ``{"choice": {"options": ["yes", "no"]}}``, and
    ``json_schema`` is a shortcut for ``response_format.json_schema`` (a dict is
    serialized to JSON); ``speculation`` takes a mode (``"off"``, ``"ngram"``, ``"draft"``,
    ``"unspecified"`` for the server's default, or a ``pb.SpeculationMode``), a
    ``pb.SpeculationOptions`` or a dict of its fields, and ``num_draft_tokens`` sets
    ``speculation.num_draft_tokens``; ``prediction`` is what the answer is expected to mostly
    repeat (text, token ids as a sequence of ``int`` or ``pb.TokenIds``, or a
    ``pb.Prediction``), proposed as speculative drafts: the same output, sooner where it
    matches (usage's ``accepted_prediction_tokens`` and ``rejected_prediction_tokens``;
    INVALID_ARGUMENT with ``speculation="off"``); ``priority`` (-100 to 100, default 0: higher starts
    first among waiting requests, and waiting raises it, so none starves); ``keep_alive``
    (``keep_alive_seconds``): seconds an on-demand (catalog) model stays loaded once idle after
    this request (0: unloaded once idle; ``None``: the catalog's setting); other keywords (``logprobs``, ``top_logprobs``,
    ``session_id``, ``n``, ``prompt_logprobs``, ...) are request fields. ``n`` answers share
    the prompt (:attr:`GenerationResult.choices`); ``prompt_logprobs=K`` returns the prompt
    tokens' log probabilities with K alternatives (:attr:`GenerationResult.prompt_logprobs`).
    Every sampler is a ``sampling`` field, nested ones as dicts: ``{"temperature": 0.8,
    "typical_p": 0.9, "xtc": {"probability": 0.5}, "dry": {"multiplier": 0.8},
    "mirostat": {"tau": 5.0}, "dynamic_temperature": {"range": 0.3}, "sampler_order":
    "SAMPLER_ORDER_LLAMA_CPP", "bad_words": ["darn"], "allowed_token_ids": [...]}``.

    Chat prompts only (a ``ValueError`` otherwise): ``tools`` are ``pb.Tool`` or dicts
    ``{"name", "description", "parameters"}`` (``parameters``: a JSON Schema as a dict or
    JSON text); ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"`` (or a
    ``pb.ToolChoiceMode``), ``{"function_name": NAME}`` for that one function, or a
    ``pb.ToolChoice``; ``parallel_tool_calls`` and ``enable_thinking`` (``None``: the
    server's and the template's default); ``template_kwargs`` are further template
    variables, each value a Python value sent as JSON (``{"reasoning_effort": "low"}``).
    A chat message may carry ``tool_calls`` (``pb.ToolCall`` or dicts ``{"id", "name",
    "arguments"}``, ``arguments`` a dict or JSON text), a ``tool_call_id`` (role ``"tool"``)
    and ``reasoning``.
    An empty ``request_id`` gets a random one here, so the Cancel RPC can address the
    request before its ``started`` event arrives.
    """
    if isinstance(prompt, pb.GenerateRequest):
        req = pb.GenerateRequest()
        req.CopyFrom(prompt)
    else:
        req = pb.GenerateRequest(**_prompt(prompt))
    if model:
        req.model = model
    if adapter:
        req.adapter = adapter
    if request_id:
        req.request_id = request_id
    if not req.request_id:
        req.request_id = uuid.uuid4().hex
    if sampling is not None:
        req.sampling.CopyFrom(sampling if isinstance(sampling, pb.SamplingParams) else pb.SamplingParams(**sampling))
    if stopping is not None:
        req.stopping.CopyFrom(stopping if isinstance(stopping, pb.StoppingCriteria) else pb.StoppingCriteria(**stopping))
    if max_tokens is not None:
        req.stopping.max_tokens = max_tokens
    if response_format is not None:
        req.response_format.CopyFrom(response_format if isinstance(response_format, pb.ResponseFormat)
                                     else pb.ResponseFormat(**response_format))
    if json_schema is not None:
        req.response_format.json_schema = _json_text(json_schema)
    if speculation is not None:
        req.speculation.CopyFrom(_speculation(speculation))
    if num_draft_tokens is not None:
        req.speculation.num_draft_tokens = num_draft_tokens
    if prediction is not None:
        req.prediction.CopyFrom(_prediction(prediction))
    if priority is not None:
        req.priority = priority
    if keep_alive is not None:
        req.keep_alive_seconds = keep_alive
    chat_options = (tools, tool_choice, parallel_tool_calls, enable_thinking, template_kwargs)
    if any(v is not None for v in chat_options):
        if req.WhichOneof("prompt") != "chat":
            raise ValueError("tools, tool_choice, parallel_tool_calls, enable_thinking and template_kwargs "
                             "need a chat prompt (a list of messages)")
        if tools is not None:
            del req.chat.tools[:]
            req.chat.tools.extend(_tool(t) for t in tools)
        if tool_choice is not None:
            req.chat.tool_choice.CopyFrom(_tool_choice(tool_choice))
        if parallel_tool_calls is not None:
            req.chat.parallel_tool_calls = parallel_tool_calls
        if enable_thinking is not None:
            req.chat.enable_thinking = enable_thinking
        if template_kwargs is not None:
            req.chat.template_kwargs.clear()
            req.chat.template_kwargs.update({k: json.dumps(v) for k, v in template_kwargs.items()})
    for name, value in fields.items():
        if name not in pb.GenerateRequest.DESCRIPTOR.fields_by_name:
            raise TypeError(f"GenerateRequest has no field {name!r}")
        setattr(req, name, value)
    return req


def prefetch_request(
    prompt: PrefetchPrompt,
    *,
    model: str = "",
    session_id: str = "",
    adapter: str = "",
) -> pb.PrefetchRequest:
    """Builds a PrefetchRequest: ``prompt`` as in :func:`generate_request` (text, token ids
    or chat messages; the chat template is applied as Generate would), or a whole
    ``pb.PrefetchRequest`` that the keywords then override. ``session_id`` gives the entry
    brought into memory that session's affinity; ``adapter`` is the one the later Generate
    will name (prefixes are kept per adapter)."""
    if isinstance(prompt, pb.PrefetchRequest):
        req = pb.PrefetchRequest()
        req.CopyFrom(prompt)
    else:
        req = pb.PrefetchRequest(**_prompt(prompt))
    if model:
        req.model = model
    if session_id:
        req.session_id = session_id
    if adapter:
        req.adapter = adapter
    return req


def _speculation_mode(mode: str | int) -> int:
    if isinstance(mode, int):
        return mode
    name = mode.upper()
    try:
        return pb.SpeculationMode.Value(name if name.startswith("SPECULATION_MODE_") else f"SPECULATION_MODE_{name}")
    except ValueError:
        choices = ", ".join(n.removeprefix("SPECULATION_MODE_").lower() for n in pb.SpeculationMode.keys())
        raise ValueError(f"unknown speculation mode {mode!r} (one of {choices})") from None


def _speculation(value: str | int | pb.SpeculationOptions | Mapping[str, Any]) -> pb.SpeculationOptions:
    if isinstance(value, pb.SpeculationOptions):
        return value
    if isinstance(value, Mapping):
        fields = dict(value)
        if "mode" in fields:
            fields["mode"] = _speculation_mode(fields["mode"])
        return pb.SpeculationOptions(**fields)
    return pb.SpeculationOptions(mode=_speculation_mode(value))


def _prediction(value: str | Sequence[int] | pb.TokenIds | pb.Prediction) -> pb.Prediction:
    """The ``content`` oneof (``text`` or ``tokens``) of a text or token-id prediction."""
    if isinstance(value, pb.Prediction):
        return value
    if isinstance(value, str):
        return pb.Prediction(text=value)
    if isinstance(value, pb.TokenIds):
        return pb.Prediction(tokens=value)
    if (isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray))
            and all(isinstance(t, int) for t in value)):
        return pb.Prediction(tokens=pb.TokenIds(ids=value))
    raise TypeError(f"a prediction is text, token ids or a pb.Prediction, not {type(value).__name__}")


#: What ``truncate=`` takes besides a ``pb.Truncation``: ``"end"`` cuts an input longer than
#: the model's limit (the server's default), ``"none"`` has the server refuse it
#: (INVALID_ARGUMENT naming the input).
Truncate = Union[str, int]


def _truncation(value: Truncate) -> int:
    if isinstance(value, int):
        return value
    name = value.upper()
    try:
        return pb.Truncation.Value(name if name.startswith("TRUNCATION_") else f"TRUNCATION_{name}")
    except ValueError:
        choices = ", ".join(n.removeprefix("TRUNCATION_").lower() for n in pb.Truncation.keys())
        raise ValueError(f"unknown truncation {value!r} (one of {choices})") from None


def embed_request(
    inputs: str | Sequence[str],
    *,
    model: str = "",
    instruction: str = "",
    normalize: bool | None = None,
    dimensions: int = 0,
    request_id: str = "",
    priority: int = 0,
    truncate: Truncate | None = None,
    packed: bool = False,
    embedding_type: EmbeddingTypeArg | None = None,
    keep_alive: float | None = None,
) -> pb.EmbedRequest:
    """Builds an EmbedRequest; ``priority`` as in :func:`generate_request`; ``truncate``
    is what the server does with an input longer than the model's limit: ``"end"`` cuts
    it (the default: the response's ``tokens`` says how many were used), ``"none"``
    refuses the request (INVALID_ARGUMENT naming the input), or a ``pb.Truncation``.
    ``packed`` has the server send up to 64 vectors a message as bytes of
    ``embedding_type``: ``"float32"`` (the default), ``"float16"``, ``"int8"`` or
    ``"ubinary"`` (or a ``pb.EmbeddingType``); types other than float32 need ``packed``
    (the server refuses them otherwise: INVALID_ARGUMENT naming ``embedding_type``).
    ``keep_alive`` (``keep_alive_seconds``) as in :func:`generate_request`."""
    req = pb.EmbedRequest(
        model=model,
        inputs=[inputs] if isinstance(inputs, str) else list(inputs),
        instruction=instruction,
        dimensions=dimensions,
        request_id=request_id,
        priority=priority,
        packed=packed,
    )
    if normalize is not None:
        req.normalize = normalize
    if truncate is not None:
        req.truncate = _truncation(truncate)
    if embedding_type is not None:
        req.embedding_type = embedding_type_value(embedding_type)
    if keep_alive is not None:
        req.keep_alive_seconds = keep_alive
    return req


def _model_kind(kind: str | int) -> int:
    if isinstance(kind, int):
        return kind
    name = kind.upper()
    try:
        return pb.ModelKind.Value(name if name.startswith("MODEL_KIND_") else f"MODEL_KIND_{name}")
    except ValueError:
        choices = ", ".join(n.removeprefix("MODEL_KIND_").lower() for n in pb.ModelKind.keys())
        raise ValueError(f"unknown model kind {kind!r} (one of {choices})") from None


def load_model_request(
    name: str,
    source: str = "",
    *,
    kind: str | int = "generation",
    dtype: str = "",
    kv_bits: int = 0,
    draft_model: str = "",
    context_length: int = 0,
    keep_alive: float | None = None,
) -> pb.LoadModelRequest:
    """Builds a LoadModelRequest: the model at ``source`` (a directory or a ``.gguf`` file,
    relative to the server's ``--model-root``; empty with the name of a catalog model: that
    entry) loaded as ``name``. ``kind`` is ``"generation"`` (the default), ``"embedding"``,
    ``"speech"`` (a Whisper directory for Transcribe; no options) or a ``pb.ModelKind``; ``dtype`` (``"auto"``, ``"float32"``, ``"float16"``, ``"bfloat16"``),
    ``kv_bits`` (0, 8 or 4), ``draft_model`` (relative to the root as ``source``) and
    ``context_length`` are its ``options``, each left at its zero value for the server's
    setting; ``keep_alive`` (``keep_alive_seconds``) is how long it stays loaded once idle
    (0: unloaded once idle, negative: until :meth:`unload_model`; ``None``: kept)."""
    req = pb.LoadModelRequest(
        name=name,
        source=source,
        kind=_model_kind(kind),
        options=pb.ModelOptions(dtype=dtype, kv_bits=kv_bits, draft_model=draft_model,
                                context_length=context_length),
    )
    if keep_alive is not None:
        req.keep_alive_seconds = keep_alive
    return req


def loaded_model(last: pb.LoadModelResponse | None, name: str) -> pb.ModelInfo:
    """The model of a LoadModel stream's last message, which must be SERVING."""
    if last is None or last.stage != pb.LOAD_STAGE_SERVING or not last.HasField("model"):
        stage = "no message" if last is None else pb.LoadStage.Name(last.stage)
        raise RuntimeError(f"LoadModel of {name!r} ended without SERVING (last: {stage})")
    return last.model


def rerank_request(
    query: str,
    documents: str | Sequence[str],
    *,
    model: str = "",
    top_n: int = 0,
    truncate: Truncate | None = None,
    request_id: str = "",
    priority: int = 0,
) -> pb.RerankRequest:
    """Builds a RerankRequest: ``documents`` scored against ``query`` by a reranking model
    (``model`` empty: the server's first). ``top_n`` keeps only the highest scored (0: all);
    ``truncate`` (``"end"``, ``"none"`` or a ``pb.Truncation``) is what happens to a query
    and document longer together than the model's limit, as in :func:`embed_request`;
    ``priority`` as in :func:`generate_request`."""
    req = pb.RerankRequest(
        model=model,
        query=query,
        documents=[documents] if isinstance(documents, str) else list(documents),
        top_n=top_n,
        request_id=request_id,
        priority=priority,
    )
    if truncate is not None:
        req.truncate = _truncation(truncate)
    return req


def classify_request(
    inputs: str | Sequence[str],
    *,
    model: str = "",
    top_k: int = 0,
    truncate: Truncate | None = None,
    request_id: str = "",
    priority: int = 0,
) -> pb.ClassifyRequest:
    """Builds a ClassifyRequest: each of ``inputs`` classified on its own by a sequence
    classifier (``model`` empty: the server's first classifier, else its first reranker).
    ``top_k`` keeps only each input's highest scored labels (0: all); ``truncate`` and
    ``priority`` as in :func:`embed_request`."""
    req = pb.ClassifyRequest(
        model=model,
        inputs=[inputs] if isinstance(inputs, str) else list(inputs),
        top_k=top_k,
        request_id=request_id,
        priority=priority,
    )
    if truncate is not None:
        req.truncate = _truncation(truncate)
    return req


@dataclasses.dataclass
class Choice:
    """One answer of a Generate stream (GenerateRequest.n of them; one by default)."""

    #: GenerateResponse.choice_index: 0 to n-1.
    index: int = 0
    token_ids: list[int] = dataclasses.field(default_factory=list)
    #: The answer's text (without reasoning or tool-call markup).
    text: str = ""
    logprobs: list[pb.TokenLogprob] = dataclasses.field(default_factory=list)
    #: The model's thinking (TokenDelta.reasoning), kept out of ``text``.
    reasoning: str = ""
    #: The complete tool calls (TokenDelta.tool_calls), checked against the tools: the ones
    #: to run. ``arguments_json`` is a JSON object as text.
    tool_calls: list[pb.ToolCall] = dataclasses.field(default_factory=list)
    #: The calls as their pieces streamed (TokenDelta.tool_call_deltas joined by index), so
    #: far: a call cut short shows here only; ``tool_calls`` is authoritative.
    streamed_tool_calls: list[pb.ToolCall] = dataclasses.field(default_factory=list)
    #: This choice's ``finished`` event; ``None`` when the stream ended without one
    #: (cancelled client-side).
    finished: pb.GenerationFinished | None = None

    @property
    def finish_reason(self) -> int:
        """A ``pb.FinishReason`` value (``pb.FINISH_REASON_UNSPECIFIED`` without a finished event)."""
        return self.finished.reason if self.finished is not None else pb.FINISH_REASON_UNSPECIFIED

    def assistant_message(self) -> pb.ChatMessage:
        """The answer as the assistant message of the next turn's conversation: its text,
        tool calls and reasoning (append a ``"tool"`` message per call after it)."""
        return pb.ChatMessage(role="assistant", content=self.text, tool_calls=self.tool_calls,
                              reasoning=self.reasoning)

    def _add_delta(self, delta: pb.TokenDelta) -> None:
        self.token_ids.extend(delta.token_ids)
        self.text += delta.text
        self.logprobs.extend(delta.logprobs)
        self.reasoning += delta.reasoning
        self.tool_calls.extend(delta.tool_calls)
        for piece in delta.tool_call_deltas:
            while len(self.streamed_tool_calls) <= piece.index:
                self.streamed_tool_calls.append(pb.ToolCall())
            call = self.streamed_tool_calls[piece.index]
            call.id = piece.id or call.id
            call.name = piece.name or call.name
            call.arguments_json += piece.arguments_json


@dataclasses.dataclass
class GenerationResult(Choice):
    """What a Generate stream produced, gathered from its events. Its own answer fields
    (``text``, ``token_ids``, ``finished``, ...) are the first choice's; ``choices`` holds
    every choice by ``choice_index`` (``n`` of them), the first included."""

    request_id: str = ""
    model: str = ""
    prompt_tokens: int = 0
    #: The prompt_logprobs event's tokens (prompt tokens 1 to n-1), when the request asked
    #: for ``prompt_logprobs``.
    prompt_logprobs: list[pb.TokenLogprob] = dataclasses.field(default_factory=list)
    #: Every choice in index order.
    choices: list[Choice] = dataclasses.field(default_factory=list)

    def _choice(self, index: int) -> Choice:
        while len(self.choices) <= index:
            self.choices.append(Choice(index=len(self.choices)))
        return self.choices[index]

    def _add(self, event: pb.GenerateResponse) -> None:
        kind = event.WhichOneof("event")
        if kind == "started":
            self.request_id = event.started.request_id
            self.model = event.started.model
            self.prompt_tokens = event.started.prompt_tokens
        elif kind == "prompt_logprobs":
            self.prompt_logprobs.extend(event.prompt_logprobs.tokens)
        elif kind == "delta":
            self._choice(event.choice_index)._add_delta(event.delta)
            if event.choice_index == 0:
                self._add_delta(event.delta)
        elif kind == "finished":
            self._choice(event.choice_index).finished = event.finished
            if event.choice_index == 0:
                self.finished = event.finished


@dataclasses.dataclass
class ErrorDetails:
    """The google.rpc details of a failed call (see :func:`error_details`)."""

    code: grpc.StatusCode
    message: str
    error_info: error_details_pb2.ErrorInfo | None = None
    bad_request: error_details_pb2.BadRequest | None = None
    retry_info: error_details_pb2.RetryInfo | None = None
    #: The whole google.rpc.Status from the trailer (``None`` when the server sent none),
    #: for detail types not unpacked above.
    status: status_pb2.Status | None = None

    @property
    def reason(self) -> str:
        """ErrorInfo.reason, e.g. ``"INVALID_FIELD"`` (empty without ErrorInfo)."""
        return self.error_info.reason if self.error_info else ""

    @property
    def field_violations(self) -> list[error_details_pb2.BadRequest.FieldViolation]:
        return list(self.bad_request.field_violations) if self.bad_request else []

    @property
    def retry_delay(self) -> float | None:
        """RetryInfo.retry_delay in seconds, or ``None`` without RetryInfo."""
        if self.retry_info is None:
            return None
        return self.retry_info.retry_delay.ToTimedelta().total_seconds()


def error_details(err: grpc.RpcError) -> ErrorDetails:
    """Unpacks ErrorInfo, BadRequest and RetryInfo from the ``grpc-status-details-bin``
    trailer of a failed call: a ``grpc.RpcError`` from the blocking client or a
    ``grpc.aio.AioRpcError`` from the asyncio one."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = err.details() if hasattr(err, "details") else str(err)
    out = ErrorDetails(code=code, message=message or "")
    try:
        status = rpc_status.from_call(err)
    except (ValueError, AttributeError):  # no trailer, or one that contradicts the status
        status = None
    if status is None:
        return out
    out.status = status
    for any_ in status.details:
        for attr, cls in (("error_info", error_details_pb2.ErrorInfo),
                          ("bad_request", error_details_pb2.BadRequest),
                          ("retry_info", error_details_pb2.RetryInfo)):
            if any_.Is(cls.DESCRIPTOR) and getattr(out, attr) is None:
                msg = cls()
                any_.Unpack(msg)
                setattr(out, attr, msg)
    return out
