"""Protobuf <-> engine conversion for generation, models and adapters (the pooling tasks'
in pooling_convert.py). No logic beyond translation."""

from __future__ import annotations

from engine.adapters.info import AdapterInfo
from engine.caches.tier import Prefetched, Tier
from engine.description import MediaSupport, ModelDescription, ModelKind
from engine.errors import InvalidRequest
from engine.events import Delta, Event, Finished, FinishReason, PromptLogprobs, Started
from engine.requests import (
    AudioPart,
    ChatMessage,
    ChatPrompt,
    FormatKind,
    GenerationRequest,
    ImagePart,
    Part,
    Prediction,
    ResponseFormat,
    SpeculationMode,
    SpeculationOptions,
    StopOptions,
    TextPart,
    TextPrompt,
    TokenPrompt,
    Tool,
    ToolCall,
    ToolChoiceMode,
    VideoPart,
)
from engine.tenancy import ANONYMOUS, Tenant
from engine.validation import RequestCounts, most, parse_json

from .gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from .gen.mlxgrpc.v1 import inference_service_pb2 as pb
from .gen.mlxgrpc.v1 import model_pb2 as model_pb
from .sampling import sampling_options

_FINISH = {
    FinishReason.LENGTH: gen_pb.FINISH_REASON_LENGTH,
    FinishReason.STOP: gen_pb.FINISH_REASON_STOP,
    FinishReason.EOS: gen_pb.FINISH_REASON_EOS,
    FinishReason.CANCELLED: gen_pb.FINISH_REASON_CANCELLED,
    FinishReason.ERROR: gen_pb.FINISH_REASON_ERROR,
    FinishReason.TOOL_CALLS: gen_pb.FINISH_REASON_TOOL_CALLS,
}
_TOOL_CHOICE = {
    gen_pb.TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode.AUTO,
    gen_pb.TOOL_CHOICE_MODE_AUTO: ToolChoiceMode.AUTO,
    gen_pb.TOOL_CHOICE_MODE_NONE: ToolChoiceMode.NONE,
    gen_pb.TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode.REQUIRED,
    gen_pb.TOOL_CHOICE_MODE_FUNCTION: ToolChoiceMode.FUNCTION,
}
_SPECULATION = {
    gen_pb.SPECULATION_MODE_UNSPECIFIED: SpeculationMode.DEFAULT,
    gen_pb.SPECULATION_MODE_OFF: SpeculationMode.OFF,
    gen_pb.SPECULATION_MODE_NGRAM: SpeculationMode.NGRAM,
    gen_pb.SPECULATION_MODE_DRAFT: SpeculationMode.DRAFT,
}
_SPECULATION_PB = {mode: value for value, mode in _SPECULATION.items()}
_KIND = {ModelKind.GENERATION: model_pb.MODEL_KIND_GENERATION,
         ModelKind.EMBEDDING: model_pb.MODEL_KIND_EMBEDDING, ModelKind.SPEECH: model_pb.MODEL_KIND_SPEECH}
_ADAPTER_KIND = {"lora": model_pb.ADAPTER_KIND_LORA, "dora": model_pb.ADAPTER_KIND_DORA}


def generation_request(msg: pb.GenerateRequest, tenant: Tenant = ANONYMOUS) -> GenerationRequest:
    return GenerationRequest(tenant=tenant, priority=msg.priority,
        prompt=_prompt(msg), request_id=msg.request_id, model=msg.model,
        session_id=msg.session_id, sampling=sampling_options(msg.sampling),
        stopping=_stopping(msg.stopping), logprobs=msg.logprobs,
        top_logprobs=msg.top_logprobs, bypass_prefix_cache=msg.bypass_prefix_cache,
        speculation=_speculation(msg.speculation),
        response_format=_response_format(msg.response_format), adapter=msg.adapter, n=msg.n or 1,
        prompt_logprobs=msg.prompt_logprobs if msg.HasField("prompt_logprobs") else None,
        prediction=_prediction(msg.prediction) if msg.HasField("prediction") else None)


def _prediction(p: gen_pb.Prediction) -> Prediction:
    which = p.WhichOneof("content")
    if which == "text":
        return Prediction(text=p.text)
    if which == "tokens":
        return Prediction(token_ids=tuple(p.tokens.ids))
    raise InvalidRequest("prediction", "set one of text or tokens")


def prefetch_request(msg: pb.PrefetchRequest, tenant: Tenant = ANONYMOUS) -> GenerationRequest:
    """A prefetch reads its prompt as a Generate of the same fields would."""
    return GenerationRequest(tenant=tenant, prompt=_prompt(msg), model=msg.model, session_id=msg.session_id,
                             adapter=msg.adapter)


_TIER = {Tier.NONE: pb.CACHE_TIER_UNSPECIFIED, Tier.MEMORY: pb.CACHE_TIER_MEMORY, Tier.DISK: pb.CACHE_TIER_DISK}


def prefetch_response(p: Prefetched) -> pb.PrefetchResponse:
    return pb.PrefetchResponse(prompt_tokens=p.prompt_tokens, cached_tokens=p.cached_tokens, tier=_TIER[p.tier])


def _speculation(s: gen_pb.SpeculationOptions) -> SpeculationOptions:
    if s.mode not in _SPECULATION:
        raise InvalidRequest("speculation.mode", f"unknown mode {s.mode}")
    return SpeculationOptions(_SPECULATION[s.mode], s.num_draft_tokens)


def generation_counts(msg: pb.GenerateRequest | pb.PrefetchRequest) -> RequestCounts:
    """The repeated fields' sizes on the wire message, before anything is converted."""
    which = msg.WhichOneof("prompt")
    generate = isinstance(msg, pb.GenerateRequest)
    chat = msg.chat if which == "chat" else None
    return RequestCounts(
        prompt_ids=len(msg.tokens.ids) if which == "tokens" else 0,
        chat_messages=len(chat.messages) if chat else 0,
        stop_strings=len(msg.stopping.stop) if generate else 0,
        stop_token_ids=len(msg.stopping.stop_token_ids) if generate else 0,
        logit_bias=len(msg.sampling.logit_bias) if generate else 0,
        tools=len(chat.tools) if chat else 0,
        template_kwargs=len(chat.template_kwargs) if chat else 0,
        template_kwargs_bytes=_json_bytes(chat.template_kwargs) if chat else 0,
        message_parts=most(len(m.parts) for m in chat.messages) if chat else (0, 0),
        message_tool_calls=most(len(m.tool_calls) for m in chat.messages) if chat else (0, 0),
        prediction_ids=len(msg.prediction.tokens.ids) if generate else 0)


def _json_bytes(texts) -> int:
    """UTF-8 bytes of a map's values, counted only while the map holds few entries."""
    if len(texts) > 1024:
        return 0  # refused by its entry count first
    return sum(len(v.encode("utf-8")) for v in texts.values())


def _prompt(msg: pb.GenerateRequest):
    which = msg.WhichOneof("prompt")
    if which == "text":
        return TextPrompt(msg.text)
    if which == "tokens":
        return TokenPrompt(tuple(msg.tokens.ids))
    if which == "chat":
        return _chat(msg.chat)
    raise InvalidRequest("prompt", "set exactly one of text, tokens or chat")


def _chat(c: gen_pb.ChatMessages) -> ChatPrompt:
    if c.tool_choice.mode not in _TOOL_CHOICE:
        raise InvalidRequest("chat.tool_choice.mode", f"unknown mode {c.tool_choice.mode}")
    return ChatPrompt(
        tuple(_message(i, m) for i, m in enumerate(c.messages)),
        tools=tuple(Tool(t.name, t.description, t.parameters_json_schema) for t in c.tools),
        tool_choice=_TOOL_CHOICE[c.tool_choice.mode], function=c.tool_choice.function_name,
        parallel_tool_calls=c.parallel_tool_calls if c.HasField("parallel_tool_calls") else True,
        enable_thinking=c.enable_thinking if c.HasField("enable_thinking") else None,
        template_kwargs={k: _json_value(f"chat.template_kwargs[{k}]", v) for k, v in c.template_kwargs.items()})


def _message(i: int, m: gen_pb.ChatMessage) -> ChatMessage:
    if m.parts and m.content:
        raise InvalidRequest(f"chat.messages[{i}].parts", "set content or parts, not both")
    parts = tuple(_part(f"chat.messages[{i}].parts[{j}]", p) for j, p in enumerate(m.parts))
    content = "".join(p.text for p in parts if isinstance(p, TextPart)) if parts else m.content
    return ChatMessage(m.role, content, tool_calls=tuple(ToolCall(t.id, t.name, t.arguments_json)
                                                         for t in m.tool_calls),
                       tool_call_id=m.tool_call_id, reasoning=m.reasoning,
                       parts=parts if any(not isinstance(p, TextPart) for p in parts) else ())


def _part(field: str, p: gen_pb.ContentPart) -> Part:
    which = p.WhichOneof("part")
    if which == "text":
        return TextPart(p.text)
    if which == "image":
        return ImagePart(p.image.data, p.image.media_type)
    if which == "video":
        return VideoPart(p.video.data, p.video.media_type)
    if which == "audio":
        return AudioPart(p.audio.data, p.audio.media_type)
    raise InvalidRequest(field, "set text, image, video or audio")


def _json_value(field: str, text: str) -> object:
    """Its size was counted before conversion (``generation_counts``); its nesting is capped here."""
    return parse_json(field, text, max_bytes=None)


def _response_format(f: gen_pb.ResponseFormat) -> ResponseFormat | None:
    which = f.WhichOneof("format")
    if which is None:
        return None
    kind = FormatKind(which)
    if kind is FormatKind.CHOICE:
        return ResponseFormat(kind, options=tuple(f.choice.options))
    if kind is FormatKind.JSON_OBJECT:
        if not f.json_object:
            raise InvalidRequest("response_format.json_object", "must be true when set")
        return ResponseFormat(kind)
    return ResponseFormat(kind, text=getattr(f, which))


def _stopping(s: gen_pb.StoppingCriteria) -> StopOptions:
    return StopOptions(
        max_tokens=s.max_tokens if s.HasField("max_tokens") else None, min_tokens=s.min_tokens,
        stop=tuple(s.stop), stop_token_ids=tuple(s.stop_token_ids), ignore_eos=s.ignore_eos)


def generate_response(event: Event) -> pb.GenerateResponse:
    if isinstance(event, Started):
        return pb.GenerateResponse(started=pb.GenerationStarted(
            request_id=event.request_id, model=event.model,
            prompt_tokens=event.prompt_tokens, cached_tokens=event.cached_tokens))
    if isinstance(event, Delta):
        return pb.GenerateResponse(choice_index=event.choice, delta=pb.TokenDelta(
            token_ids=event.token_ids, text=event.text, reasoning=event.reasoning,
            tool_call_deltas=[gen_pb.ToolCallDelta(index=d.index, id=d.id, name=d.name, arguments_json=d.arguments)
                              for d in event.tool_call_deltas],
            tool_calls=[gen_pb.ToolCall(id=t.id, name=t.name, arguments_json=t.arguments) for t in event.tool_calls],
            logprobs=_logprobs(event.logprobs)))
    if isinstance(event, PromptLogprobs):
        return pb.GenerateResponse(prompt_logprobs=pb.PromptLogprobs(tokens=_logprobs(event.tokens)))
    assert isinstance(event, Finished)
    return pb.GenerateResponse(choice_index=event.choice, finished=_finished(event))


def _logprobs(logprobs) -> list[gen_pb.TokenLogprob]:
    return [gen_pb.TokenLogprob(token_id=lp.token_id, logprob=lp.logprob,
                                top_logprobs=[gen_pb.TopLogprob(token_id=t.token_id, logprob=t.logprob, text=t.text)
                                              for t in lp.top]) for lp in logprobs]


def _finished(e: Finished) -> pb.GenerationFinished:
    msg = pb.GenerationFinished(
        reason=_FINISH[e.reason], stop_sequence=e.stop_sequence,
        usage=gen_pb.Usage(prompt_tokens=e.usage.prompt_tokens, completion_tokens=e.usage.completion_tokens,
                           cached_tokens=e.usage.cached_tokens, draft_tokens=e.usage.draft_tokens,
                           accepted_draft_tokens=e.usage.accepted_draft_tokens,
                           accepted_prediction_tokens=e.usage.accepted_prediction_tokens,
                           rejected_prediction_tokens=e.usage.rejected_prediction_tokens),
        timings=gen_pb.Timings(queue_seconds=e.timings.queue_s,
                               time_to_first_token_seconds=e.timings.time_to_first_token_s,
                               decode_tokens_per_second=e.timings.decode_tokens_per_s,
                               total_seconds=e.timings.total_s))
    if e.stop_token_id is not None:
        msg.stop_token_id = e.stop_token_id
    return msg


def model_info(d: ModelDescription, sources: bool = True) -> model_pb.ModelInfo:
    """``sources`` False leaves the model's and its adapters' file paths out (empty): its source, its
    graph's artifact and each adapter's source."""
    c = d.capabilities
    return model_pb.ModelInfo(
        name=d.name, kind=_KIND[d.kind],
        graph=model_pb.GraphDescriptor(id=d.descriptor.id, backend=d.descriptor.backend,
                                            graph_abi=d.descriptor.graph_abi,
                                            state_abi=d.descriptor.state_abi,
                                            artifact=d.descriptor.artifact if sources else ""),
        capabilities=model_pb.GraphCapabilities(
            method=model_pb.GRAPH_METHOD_AUTOREGRESSIVE if c.method == "autoregressive"
            else model_pb.GRAPH_METHOD_DENOISING,
            compiled_decode=c.compiled_decode, sparse_attention=c.sparse_attention,
            embeddings=c.embeddings, hidden_layer_taps=c.hidden_layer_taps,
            native_draft=(model_pb.NativeDraft(kind=c.native_draft.kind,
                                               num_draft_tokens=c.native_draft.num_draft_tokens)
                          if c.native_draft is not None else None),
            prefill=model_pb.PrefillCapabilities(bounded_workspace=c.prefill_bounded_workspace),
            speculation=model_pb.SpeculationCapabilities(
                adapters=c.speculation.adapters, logprobs=c.speculation.logprobs,
                external_tokens=c.speculation.external_tokens,
                grammar_proposals=c.speculation.grammar_proposals,
                modes=[_SPECULATION_PB[m] for m in c.speculation.modes],
                default_mode=_SPECULATION_PB[c.speculation.default_mode],
                draft_model=c.speculation.draft_model),
            generation=c.generation, rerank=c.rerank, classify=c.classify, sparse_embeddings=c.sparse_embeddings,
            transcription=c.transcription,
            media=_media(c.media),
            response_formats=[model_pb.ResponseFormatKind.Value(f"RESPONSE_FORMAT_KIND_{f.upper()}")
                              for f in c.response_formats],
            chat=model_pb.ChatCapabilities(
                tool_calling=c.chat.tool_calling, tool_parser=c.chat.tool_parser,
                tool_call_start=c.chat.tool_call_start, tool_call_end=c.chat.tool_call_end,
                tool_choice_enforced=c.chat.tool_choice_enforced, reasoning_start=c.chat.reasoning_start,
                reasoning_end=c.chat.reasoning_end)),
        context_length=d.context_length, vocab_size=d.vocab_size, eos_token_ids=d.eos_token_ids,
        has_chat_template=d.has_chat_template, dtype=d.dtype, blas=d.blas,
        embedding_dimensions=d.embedding_dimensions, source=d.source if sources else "",
        adapters=[adapter_info(a, sources) for a in d.adapters], max_adapters=d.max_adapters,
        kv_cache_dtype=d.kv_cache_dtype)


_MEDIA_INPUT = {"embeddings": model_pb.MEDIA_INPUT_EMBEDDINGS,
                "embeddings+positions": model_pb.MEDIA_INPUT_EMBEDDINGS_POSITIONS}


def _media(m: MediaSupport | None) -> model_pb.MediaSupport | None:
    return model_pb.MediaSupport(input=_MEDIA_INPUT[m.input], video=m.video, audio=m.audio) if m is not None else None


def adapter_info(a: AdapterInfo, sources: bool = True) -> model_pb.AdapterInfo:
    return model_pb.AdapterInfo(
        name=a.name, kind=_ADAPTER_KIND.get(a.fine_tune_type, model_pb.ADAPTER_KIND_UNSPECIFIED), rank=a.rank,
        scale=a.scale, layers=a.layers, bytes=a.nbytes, source=a.source if sources else "",
        active_requests=a.active_requests, unloading=a.unloading)


def memory_plan(p) -> model_pb.MemoryPlan:
    msg = model_pb.MemoryPlan(
        schema_version=p.schema_version, strategy=p.strategy, fits=p.fits,
        context_tokens=p.context_tokens, max_safe_context=p.max_safe_context,
        weights_bytes=p.weights_bytes, kv_bytes=p.kv_bytes, transient_bytes=p.transient_bytes,
        reserve_bytes=p.reserve_bytes, total_bytes=p.total_bytes, usable_bytes=p.usable_bytes,
        streamed_weights=dict(p.streamed_weights), adapter_bytes=p.adapter_bytes)
    for name in ("predicted_decode_tps", "allocator_limit_bytes", "max_generation_tokens",
                 "machine_headroom_bytes"):
        value = getattr(p, name)
        if value is not None:
            setattr(msg, name, value)
    return msg
