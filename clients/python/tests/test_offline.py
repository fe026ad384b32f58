"""Client behaviour that needs no live server: request building, and the bearer token
and default deadline as a small in-process server sees them."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import time
from concurrent import futures

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from mlxgrpc_client import (Embeddings, GenerationResult, aio, classify_request, connect, embed_request, error_details,
                            generate_request, load_model_request, pb, prefetch_request, rerank_request)
from mlxgrpc_client.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc


def test_generate_request_prompt_kinds():
    assert generate_request("hi").text == "hi"
    assert list(generate_request([1, 2, 3]).tokens.ids) == [1, 2, 3]
    chat = generate_request([("system", "be brief"), {"role": "user", "content": "hi"},
                             pb.ChatMessage(role="assistant", content="hello")]).chat
    assert [(m.role, m.content) for m in chat.messages] == [
        ("system", "be brief"), ("user", "hi"), ("assistant", "hello")]
    base = pb.GenerateRequest(text="x", request_id="keep", logprobs=True)
    req = generate_request(base, max_tokens=5, sampling={"temperature": 0.5, "seed": 1}, logprobs=False)
    assert (req.text, req.request_id, req.stopping.max_tokens, req.logprobs) == ("x", "keep", 5, False)
    assert req.sampling.HasField("temperature") and req.sampling.seed == 1
    assert base.logprobs is True  # the caller's message is left alone
    assert generate_request("a").request_id != generate_request("a").request_id
    with pytest.raises(TypeError):
        generate_request("a", no_such_field=1)


def test_generate_request_structured_output():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = generate_request("hi", json_schema=schema)
    assert req.response_format.WhichOneof("format") == "json_schema"
    assert json.loads(req.response_format.json_schema) == schema
    assert generate_request("hi", json_schema='{"type": "string"}').response_format.json_schema == '{"type": "string"}'
    choice = generate_request("hi", response_format={"choice": {"options": ["yes", "no"]}}).response_format
    assert list(choice.choice.options) == ["yes", "no"]
    regex = generate_request("hi", response_format=pb.ResponseFormat(regex="[0-9]+")).response_format
    assert regex.regex == "[0-9]+"
    assert not generate_request("hi").HasField("response_format")


def test_generate_request_speculation():
    assert not generate_request("a").HasField("speculation")  # the server's default
    ngram = pb.SpeculationOptions(mode=pb.SPECULATION_MODE_NGRAM, num_draft_tokens=6)
    assert generate_request("a", speculation="ngram", num_draft_tokens=6).speculation == ngram
    assert generate_request("a", speculation={"mode": "NGRAM", "num_draft_tokens": 6}).speculation == ngram
    assert generate_request("a", speculation=ngram).speculation == ngram
    for mode in ("off", "SPECULATION_MODE_OFF", pb.SPECULATION_MODE_OFF):
        assert generate_request("a", speculation=mode).speculation.mode == pb.SPECULATION_MODE_OFF
    assert generate_request("a", speculation="draft").speculation.mode == pb.SPECULATION_MODE_DRAFT
    only_k = generate_request("a", num_draft_tokens=3)
    assert only_k.HasField("speculation") and only_k.speculation == pb.SpeculationOptions(num_draft_tokens=3)
    assert generate_request("a", speculation=ngram, num_draft_tokens=2).speculation.num_draft_tokens == 2
    assert ngram.num_draft_tokens == 6  # the caller's message is left alone
    base = pb.GenerateRequest(text="x", speculation=ngram)
    assert generate_request(base).speculation == ngram
    assert generate_request(base, speculation="off").speculation == pb.SpeculationOptions(
        mode=pb.SPECULATION_MODE_OFF)
    with pytest.raises(ValueError, match="off, ngram, draft"):
        generate_request("a", speculation="fast")


def test_generate_request_prediction():
    assert not generate_request("a").HasField("prediction")
    text = generate_request("a", prediction="def f():\n    return 1\n").prediction
    assert (text.WhichOneof("content"), text.text) == ("text", "def f():\n    return 1\n")
    for ids in ([5, 6, 7], (5, 6, 7), pb.TokenIds(ids=[5, 6, 7])):
        tokens = generate_request("a", prediction=ids).prediction
        assert tokens.WhichOneof("content") == "tokens" and list(tokens.tokens.ids) == [5, 6, 7]
    assert generate_request("a", prediction="").prediction.WhichOneof("content") == "text"  # set, if empty
    given = pb.Prediction(tokens=pb.TokenIds(ids=[1]))
    assert generate_request("a", prediction=given).prediction == given
    base = pb.GenerateRequest(text="x", prediction=pb.Prediction(text="old"))
    assert generate_request(base).prediction.text == "old"
    assert generate_request(base, prediction=[9]).prediction == pb.Prediction(tokens=pb.TokenIds(ids=[9]))
    assert base.prediction.text == "old"  # the caller's message is left alone
    req = generate_request("a", prediction="b", speculation="ngram", num_draft_tokens=8)
    assert req.speculation.mode == pb.SPECULATION_MODE_NGRAM and req.prediction.text == "b"
    for wrong in (b"bytes", [1, "2"], 3.5):
        with pytest.raises(TypeError, match="prediction"):
            generate_request("a", prediction=wrong)


WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
                          "required": ["city"]}}


def test_generate_request_tools_and_template_options():
    req = generate_request([("user", "Weather in Paris?")], tools=[WEATHER], tool_choice="required",
                           parallel_tool_calls=False, enable_thinking=False,
                           template_kwargs={"reasoning_effort": "low", "budget": 3})
    (tool,) = req.chat.tools
    assert (tool.name, tool.description) == ("get_weather", "The weather in a city.")
    assert json.loads(tool.parameters_json_schema) == WEATHER["parameters"]
    assert req.chat.tool_choice == pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED)
    assert req.chat.HasField("parallel_tool_calls") and req.chat.parallel_tool_calls is False
    assert req.chat.HasField("enable_thinking") and req.chat.enable_thinking is False
    assert dict(req.chat.template_kwargs) == {"reasoning_effort": '"low"', "budget": "3"}  # JSON values
    # Left out: unset, so the server's and the template's defaults apply.
    plain = generate_request([("user", "hi")]).chat
    assert not plain.tools and not plain.HasField("tool_choice")
    assert not plain.HasField("parallel_tool_calls") and not plain.HasField("enable_thinking")
    assert not plain.template_kwargs
    # Parameters as JSON text, a pb.Tool, and a tool without parameters.
    text = generate_request([("user", "x")], tools=[{"name": "f", "parameters": '{"type": "object"}'},
                                                   pb.Tool(name="g"), {"name": "h"}]).chat.tools
    assert [(t.name, t.parameters_json_schema) for t in text] == [("f", '{"type": "object"}'), ("g", ""), ("h", "")]


def test_generate_request_tool_choice_forms():
    def choice(value):
        return generate_request([("user", "x")], tools=[WEATHER], tool_choice=value).chat.tool_choice

    for value in ("none", "NONE", "TOOL_CHOICE_MODE_NONE", pb.TOOL_CHOICE_MODE_NONE, {"mode": "none"}):
        assert choice(value) == pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_NONE)
    assert choice("auto").mode == pb.TOOL_CHOICE_MODE_AUTO
    function = pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_FUNCTION, function_name="get_weather")
    assert choice({"function_name": "get_weather"}) == function  # the mode follows from the name
    assert choice({"mode": "function", "function_name": "get_weather"}) == function
    assert choice(function) == function
    with pytest.raises(ValueError, match="auto, none, required, function"):
        choice("get_weather")
    with pytest.raises(ValueError, match="chat prompt"):
        generate_request("plain text", tools=[WEATHER])
    with pytest.raises(ValueError, match="chat prompt"):
        generate_request([1, 2, 3], enable_thinking=False)
    # A whole request: the options apply to its chat and override it.
    base = pb.GenerateRequest(chat=pb.ChatMessages(messages=[pb.ChatMessage(role="user", content="x")],
                                                   tools=[pb.Tool(name="old")], enable_thinking=True))
    req = generate_request(base, tools=[WEATHER], enable_thinking=False)
    assert [t.name for t in req.chat.tools] == ["get_weather"] and req.chat.enable_thinking is False
    assert [t.name for t in base.chat.tools] == ["old"]  # the caller's message is left alone


def test_chat_messages_carry_tool_calls_and_results():
    call = pb.ToolCall(id="call_1", name="get_weather", arguments_json='{"city": "Paris"}')
    chat = generate_request([
        ("user", "Weather in Paris and Rome?"),
        {"role": "assistant", "content": "", "reasoning": "two cities",
         "tool_calls": [call, {"id": "call_2", "name": "get_weather", "arguments": {"city": "Rome"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
        {"role": "tool", "tool_call_id": "call_2", "parts": [{"text": '{"temp_c": '}, {"text": "25}"}]},
    ]).chat
    assistant = chat.messages[1]
    assert assistant.reasoning == "two cities"
    assert [(c.id, c.name, json.loads(c.arguments_json)) for c in assistant.tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_weather", {"city": "Rome"})]
    assert [(m.role, m.tool_call_id) for m in chat.messages[2:]] == [("tool", "call_1"), ("tool", "call_2")]
    assert [p.text for p in chat.messages[3].parts] == ['{"temp_c": ', "25}"]


def _delta(**fields) -> pb.GenerateResponse:
    return pb.GenerateResponse(delta=pb.TokenDelta(**fields))


def test_result_gathers_text_reasoning_and_tool_calls():
    result = GenerationResult(request_id="r")
    events = [
        pb.GenerateResponse(started=pb.GenerationStarted(request_id="r", model="tools", prompt_tokens=9)),
        _delta(token_ids=[1, 2], reasoning="Let me "),
        _delta(token_ids=[3], reasoning="check.", text="Sure"),
        _delta(token_ids=[4], text=".", tool_call_deltas=[pb.ToolCallDelta(index=0, id="call_a", name="get_weather")]),
        _delta(token_ids=[5], tool_call_deltas=[pb.ToolCallDelta(index=0, arguments_json='{"city": ')]),
        _delta(token_ids=[6], tool_call_deltas=[pb.ToolCallDelta(index=0, arguments_json='"Paris"}')],
               tool_calls=[pb.ToolCall(id="call_a", name="get_weather", arguments_json='{"city":"Paris"}')]),
        _delta(token_ids=[7], tool_call_deltas=[pb.ToolCallDelta(index=1, id="call_b", name="get_time",
                                                                 arguments_json="{}")]),
        pb.GenerateResponse(finished=pb.GenerationFinished(reason=pb.FINISH_REASON_TOOL_CALLS)),
    ]
    for event in events:
        result._add(event)
    assert (result.model, result.prompt_tokens, result.token_ids) == ("tools", 9, [1, 2, 3, 4, 5, 6, 7])
    assert (result.text, result.reasoning) == ("Sure.", "Let me check.")
    assert result.finish_reason == pb.FINISH_REASON_TOOL_CALLS
    assert result.tool_calls == [pb.ToolCall(id="call_a", name="get_weather", arguments_json='{"city":"Paris"}')]
    assert result.streamed_tool_calls == [
        pb.ToolCall(id="call_a", name="get_weather", arguments_json='{"city": "Paris"}'),
        pb.ToolCall(id="call_b", name="get_time", arguments_json="{}")]  # streamed, never completed
    message = result.assistant_message()
    assert (message.role, message.content, message.reasoning) == ("assistant", "Sure.", "Let me check.")
    assert list(message.tool_calls) == result.tool_calls
    # The next turn's conversation: the assistant message, then a "tool" message per call.
    chat = generate_request([("user", "Weather?"), message, {"role": "tool", "tool_call_id": "call_a",
                                                              "content": '{"temp_c": 21}'}]).chat
    assert chat.messages[1] == message and chat.messages[2].tool_call_id == "call_a"
    plain = GenerationResult(request_id="p")
    plain._add(_delta(token_ids=[1], text="hi"))
    assert (plain.reasoning, plain.tool_calls, plain.streamed_tool_calls) == ("", [], [])


def test_result_gathers_choices_and_prompt_logprobs():
    result = GenerationResult(request_id="r")
    prompt = [pb.TokenLogprob(token_id=5, logprob=-1.5), pb.TokenLogprob(token_id=6, logprob=-0.5)]
    events = [
        pb.GenerateResponse(started=pb.GenerationStarted(request_id="r", prompt_tokens=3)),
        pb.GenerateResponse(prompt_logprobs=pb.PromptLogprobs(tokens=prompt)),
        pb.GenerateResponse(delta=pb.TokenDelta(token_ids=[1], text="a"), choice_index=1),
        pb.GenerateResponse(delta=pb.TokenDelta(token_ids=[2], text="b")),
        pb.GenerateResponse(delta=pb.TokenDelta(token_ids=[3], text="c"), choice_index=1),
        pb.GenerateResponse(finished=pb.GenerationFinished(reason=pb.FINISH_REASON_EOS)),
        pb.GenerateResponse(finished=pb.GenerationFinished(reason=pb.FINISH_REASON_LENGTH), choice_index=1),
    ]
    for event in events:
        result._add(event)
    assert result.prompt_logprobs == prompt
    assert [(c.index, c.token_ids, c.text, c.finish_reason) for c in result.choices] == [
        (0, [2], "b", pb.FINISH_REASON_EOS), (1, [1, 3], "ac", pb.FINISH_REASON_LENGTH)]
    assert (result.token_ids, result.text, result.finish_reason) == ([2], "b", pb.FINISH_REASON_EOS)


def test_new_request_fields_and_samplers():
    req = generate_request("a", n=3, prompt_logprobs=2, sampling={
        "typical_p": 0.9, "top_n_sigma": 1.5, "xtc": {"probability": 0.5, "threshold": 0.25},
        "dry": {"multiplier": 0.8, "sequence_breakers": ["\n"]}, "mirostat": {"tau": 5.0},
        "dynamic_temperature": {"range": 0.3, "exponent": 1.0}, "sampler_order": "SAMPLER_ORDER_LLAMA_CPP",
        "bad_words": ["darn"], "allowed_token_ids": [1, 2, 3]})
    assert (req.n, req.HasField("prompt_logprobs"), req.prompt_logprobs) == (3, True, 2)
    assert req.sampling.sampler_order == pb.SAMPLER_ORDER_LLAMA_CPP and req.sampling.xtc.threshold == 0.25
    assert list(req.sampling.dry.sequence_breakers) == ["\n"] and req.sampling.HasField("mirostat")
    assert not generate_request("a").HasField("prompt_logprobs")


def test_priority_on_generate_and_embed_requests():
    assert generate_request("a").priority == 0  # the server's default
    assert generate_request("a", priority=10).priority == 10
    assert generate_request(pb.GenerateRequest(text="x", priority=-7)).priority == -7
    assert generate_request(pb.GenerateRequest(text="x", priority=-7), priority=3).priority == 3
    assert embed_request("a").priority == 0
    assert embed_request(["a", "b"], priority=-100).priority == -100


def test_keep_alive_on_generate_and_embed_requests():
    assert not generate_request("a").HasField("keep_alive_seconds")  # unset: the catalog's keep_alive
    assert not embed_request("a").HasField("keep_alive_seconds")
    zero = generate_request("a", keep_alive=0)
    assert zero.HasField("keep_alive_seconds") and zero.keep_alive_seconds == 0.0  # unloaded once idle
    assert generate_request("a", keep_alive=90.5).keep_alive_seconds == 90.5
    assert generate_request(pb.GenerateRequest(text="x", keep_alive_seconds=5), keep_alive=-1).keep_alive_seconds == -1
    req = embed_request(["a", "b"], keep_alive=300)
    assert req.HasField("keep_alive_seconds") and req.keep_alive_seconds == 300.0


def test_load_model_request():
    req = load_model_request("m", "models/m", kind="embedding", dtype="float16", kv_bits=8, draft_model="d",
                             context_length=2048, keep_alive=60)
    assert (req.name, req.source, req.kind) == ("m", "models/m", pb.MODEL_KIND_EMBEDDING)
    assert req.options == pb.ModelOptions(dtype="float16", kv_bits=8, draft_model="d", context_length=2048)
    assert req.HasField("keep_alive_seconds") and req.keep_alive_seconds == 60.0
    plain = load_model_request("catalog-entry")
    assert (plain.source, plain.kind, plain.options) == ("", pb.MODEL_KIND_GENERATION, pb.ModelOptions())
    assert not plain.HasField("keep_alive_seconds")  # kept until unloaded
    assert load_model_request("m", "x", kind=pb.MODEL_KIND_EMBEDDING).kind == pb.MODEL_KIND_EMBEDDING
    assert load_model_request("m", "x", kind="MODEL_KIND_GENERATION").kind == pb.MODEL_KIND_GENERATION
    assert load_model_request("m", "x", keep_alive=-1).keep_alive_seconds == -1
    with pytest.raises(ValueError, match="generation, embedding"):
        load_model_request("m", "x", kind="vision")


def test_truncate_on_embed_and_rerank_requests():
    assert not embed_request("a").truncate  # TRUNCATION_UNSPECIFIED: the server cuts (END)
    for value, want in (("end", pb.TRUNCATION_END), ("NONE", pb.TRUNCATION_NONE),
                        ("TRUNCATION_NONE", pb.TRUNCATION_NONE), (pb.TRUNCATION_END, pb.TRUNCATION_END),
                        ("unspecified", pb.TRUNCATION_UNSPECIFIED)):
        assert embed_request("a", truncate=value).truncate == want
        assert rerank_request("q", ["d"], truncate=value).truncate == want
    with pytest.raises(ValueError, match="end, none"):
        embed_request("a", truncate="start")
    with pytest.raises(ValueError, match="unknown truncation"):
        rerank_request("q", ["d"], truncate="middle")


def test_rerank_request():
    req = rerank_request("where do rivers flow?", ["Rivers flow into the sea.", "def f(): pass"], model="reranker",
                         top_n=1, request_id="r-1", priority=-5)
    assert (req.model, req.query, list(req.documents)) == (
        "reranker", "where do rivers flow?", ["Rivers flow into the sea.", "def f(): pass"])
    assert (req.top_n, req.truncate, req.request_id, req.priority) == (1, pb.TRUNCATION_UNSPECIFIED, "r-1", -5)
    assert list(rerank_request("q", "one document").documents) == ["one document"]  # not its characters
    assert list(rerank_request("q", (d for d in ("a", "b"))).documents) == ["a", "b"]
    plain = rerank_request("q", ["d"])
    assert (plain.model, plain.top_n, plain.request_id, plain.priority) == ("", 0, "", 0)  # the server's defaults


def test_classify_request():
    req = classify_request(["I loved it.", "Too slow."], model="classifier", top_k=2, truncate="none",
                           request_id="c-1", priority=-5)
    assert (req.model, list(req.inputs), req.top_k) == ("classifier", ["I loved it.", "Too slow."], 2)
    assert (req.truncate, req.request_id, req.priority) == (pb.TRUNCATION_NONE, "c-1", -5)
    assert list(classify_request("one text").inputs) == ["one text"]  # not its characters
    plain = classify_request(t for t in ("a", "b"))
    assert list(plain.inputs) == ["a", "b"]
    assert (plain.model, plain.top_k, plain.truncate, plain.request_id, plain.priority) == (
        "", 0, pb.TRUNCATION_UNSPECIFIED, "", 0)  # the server's defaults
    with pytest.raises(ValueError, match="unknown truncation"):
        classify_request("a", truncate="middle")


def test_prefetch_request():
    assert prefetch_request("hi").text == "hi"
    assert list(prefetch_request([1, 2, 3]).tokens.ids) == [1, 2, 3]
    chat = prefetch_request([("user", "hi")], model="m", session_id="s-1", adapter="tone")
    assert [(m.role, m.content) for m in chat.chat.messages] == [("user", "hi")]
    assert (chat.model, chat.session_id, chat.adapter) == ("m", "s-1", "tone")
    base = pb.PrefetchRequest(text="x", session_id="keep")
    req = prefetch_request(base, adapter="tone")
    assert (req.text, req.session_id, req.adapter) == ("x", "keep", "tone")
    assert not base.adapter  # the caller's message is left alone
    assert prefetch_request(pb.PrefetchRequest()).WhichOneof("prompt") is None  # the server refuses it
    assert generate_request("a", session_id="s-2").session_id == "s-2"


def _refusal(code: int, retry_seconds: float | None, reason: str = "QUEUE_FULL") -> grpc.Status:
    status = status_pb2.Status(code=code, message="refused for now")
    status.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain="mlxgrpc.v1"))
    if retry_seconds is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(retry_seconds * 1000))
        status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return rpc_status.to_status(status)


class _Recorder(pb_grpc.InferenceServiceServicer):
    """Records metadata and deadlines; Generate refuses ``refusals`` times with
    ``refusal`` (before or, with ``refuse_after_started``, after its first event)."""

    def __init__(self):
        self.seen = []
        self.generate_ids = []
        self.priorities = []
        self.refusals = 0
        self.refusal = _refusal(code_pb2.RESOURCE_EXHAUSTED, 0.2)
        self.refuse_after_started = False
        self.cancels = []
        self.script = None  # events Generate sends instead of its one finished event
        self.requests = []

    def Generate(self, request, context):
        self.generate_ids.append(request.request_id)
        self.priorities.append(request.priority)
        self.requests.append(request)
        if self.script is not None:
            yield from self.script
            return
        if self.refuse_after_started:
            yield pb.GenerateResponse(started=pb.GenerationStarted(request_id=request.request_id))
        if self.refusals > 0:
            self.refusals -= 1
            context.abort_with_status(self.refusal)
        yield pb.GenerateResponse(finished=pb.GenerationFinished(reason=pb.FINISH_REASON_LENGTH))

    def Embed(self, request, context):
        self.priorities.append(request.priority)
        self.requests.append(request)
        if request.packed:  # two messages, the later inputs first (float32 value: the index)
            order = list(range(len(request.inputs)))
            for indices in (order[len(order) // 2:], order[:len(order) // 2]):
                if indices:
                    yield pb.EmbedResponse(packed=pb.PackedEmbeddings(
                        indices=indices, tokens=[i + 1 for i in indices], dimensions=1,
                        type=pb.EMBEDDING_TYPE_FLOAT32, data=struct.pack(f"<{len(indices)}f", *indices)))
            return
        for i, _ in enumerate(request.inputs):
            yield pb.EmbedResponse(index=i, embedding=[1.0])

    def Rerank(self, request, context):
        self.priorities.append(request.priority)
        self.requests.append(request)
        if self.refusals > 0:
            self.refusals -= 1
            context.abort_with_status(self.refusal)
        # Scores by document length, longest first: the results' order is the server's.
        order = sorted(range(len(request.documents)), key=lambda i: (-len(request.documents[i]), i))
        results = [pb.RerankResult(index=i, score=float(len(request.documents[i])) - 0.5, tokens=i + 3)
                   for i in order]
        return pb.RerankResponse(model=request.model or "reranker",
                                 results=results[:request.top_n] if request.top_n else results)

    def Classify(self, request, context):
        self.priorities.append(request.priority)
        self.requests.append(request)
        if self.refusals > 0:
            self.refusals -= 1
            context.abort_with_status(self.refusal)
        # Two labels per input: "long" scores its length / 10, "short" the rest of 1.
        results = []
        for i, text in enumerate(request.inputs):
            long = min(len(text) / 10, 1.0)
            labels = sorted([pb.LabelScore(label="long", score=long), pb.LabelScore(label="short", score=1 - long)],
                            key=lambda s: -s.score)
            results.append(pb.Classification(index=i, labels=labels[:request.top_k or None], tokens=len(text) + 2))
        return pb.ClassifyResponse(model=request.model or "classifier", results=results)

    def Prefetch(self, request, context):
        self.seen.append((dict(context.invocation_metadata()), context.time_remaining()))
        self.requests.append(request)
        if self.refusals > 0:
            self.refusals -= 1
            context.abort_with_status(self.refusal)
        return pb.PrefetchResponse(prompt_tokens=10, cached_tokens=8, tier=pb.CACHE_TIER_DISK)

    def CloseSession(self, request, context):
        self.requests.append(request)
        return pb.CloseSessionResponse(entries=2 if request.session_id == "open" else 0)

    def GetModelInfo(self, request, context):
        self.seen.append((dict(context.invocation_metadata()), context.time_remaining()))
        return pb.GetModelInfoResponse(info=pb.ModelInfo(name=request.model or "default"))

    LOAD_STAGES = (pb.LOAD_STAGE_RESOLVING, pb.LOAD_STAGE_PLANNING, pb.LOAD_STAGE_READING,
                   pb.LOAD_STAGE_READING, pb.LOAD_STAGE_WARMING, pb.LOAD_STAGE_SERVING)

    def LoadModel(self, request, context):
        """The steps of a load; source "partial" ends after RESOLVING, without SERVING."""
        self.seen.append((dict(context.invocation_metadata()), context.time_remaining()))
        self.requests.append(request)
        if self.refusals > 0:
            self.refusals -= 1
            context.abort_with_status(self.refusal)
        for i, stage in enumerate(self.LOAD_STAGES):
            step = pb.LoadModelResponse(stage=stage, elapsed_seconds=0.1 * i)
            if stage == pb.LOAD_STAGE_PLANNING:
                step.evicted.append("idle-one")
            if stage == pb.LOAD_STAGE_READING:
                step.done, step.total = (5 if i == 2 else 10), 10
            if stage == pb.LOAD_STAGE_SERVING:
                step.model.CopyFrom(pb.ModelInfo(name=request.name, kind=request.kind))
            yield step
            if request.source == "partial":
                return

    def UnloadModel(self, request, context):
        self.requests.append(request)
        if self.refusals > 0:
            self.refusals -= 1
            context.abort_with_status(self.refusal)
        return pb.UnloadModelResponse(name=request.name, freed_bytes=1234, state=pb.MODEL_STATE_UNLOADED)

    def ListModels(self, request, context):
        return pb.ListModelsResponse(
            models=[pb.ModelInfo(name="ready")],
            statuses=[pb.ModelStatus(name="ready", state=pb.MODEL_STATE_READY, resident_bytes=10),
                      pb.ModelStatus(name="lazy", state=pb.MODEL_STATE_UNLOADED, on_demand=True,
                                     keep_alive_seconds=30)])

    def Cancel(self, request, context):
        self.cancels.append(request.request_id)
        status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message="draining")
        status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2)))
        context.abort_with_status(rpc_status.to_status(status))


def _serve(credentials=None):
    servicer = _Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_InferenceServiceServicer_to_server(servicer, server)
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, servicer, port


@pytest.fixture
def recorder():
    server, servicer, port = _serve()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(None)


def test_token_and_default_deadline(recorder):
    servicer, address = recorder
    with connect(address, token="s3cret", timeout=30) as client:
        assert client.model_info("m").name == "m"
        client.model_info(timeout=None)
    (meta, remaining), (meta2, remaining2) = servicer.seen
    assert meta["authorization"] == "Bearer s3cret" == meta2["authorization"]
    assert 20 < remaining < 31  # the 30 s default deadline (clocks differ slightly)
    assert remaining2 is None or remaining2 > 1e6  # no deadline


async def test_token_async_and_retry_info(recorder):
    servicer, address = recorder
    async with aio.connect(address, token="t0k", max_attempts=1) as client:
        assert (await client.model_info()).name == "default"
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await client.cancel("x")
    assert servicer.seen[0][0]["authorization"] == "Bearer t0k"
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.UNAVAILABLE and details.retry_delay == 2.0
    assert details.error_info is None and details.field_violations == []


def test_no_token_no_header(recorder):
    servicer, address = recorder
    with connect(address) as client:
        client.model_info()
    assert "authorization" not in servicer.seen[0][0]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls_with_ca_file(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    server, servicer, port = _serve(grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())]))
    try:
        with connect(f"localhost:{port}", root_certificates=str(cert), token="tls-token", timeout=10) as client:
            assert client.model_info("over-tls").name == "over-tls"
        assert servicer.seen[0][0]["authorization"] == "Bearer tls-token"
        # The system roots do not trust the self-signed certificate.
        with connect(f"localhost:{port}", tls=True, timeout=5) as client:
            with pytest.raises(grpc.RpcError) as info:
                client.model_info()
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        # Nor does a plaintext channel reach a TLS server.
        with connect(f"localhost:{port}", timeout=5) as client:
            with pytest.raises(grpc.RpcError):
                client.model_info()
    finally:
        server.stop(None)


def test_refusals_are_retried_after_the_servers_delay(recorder):
    servicer, address = recorder
    servicer.refusals = 2
    retries = []
    with connect(address, on_retry=lambda d, delay: retries.append((d.reason, delay))) as client:
        started = time.monotonic()
        result = client.generate("hi", request_id="same-id").collect()
    assert result.finish_reason == pb.FINISH_REASON_LENGTH
    assert retries == [("QUEUE_FULL", 0.2), ("QUEUE_FULL", 0.2)]
    assert servicer.generate_ids == ["same-id"] * 3  # one request id for every attempt
    assert time.monotonic() - started >= 0.4


TOOL_TURN = [
    pb.GenerateResponse(started=pb.GenerationStarted(request_id="t", model="tools")),
    _delta(token_ids=[1], reasoning="hmm"),
    _delta(token_ids=[2], tool_call_deltas=[pb.ToolCallDelta(index=0, id="call_x", name="get_weather",
                                                             arguments_json='{"city": "Oslo"}')],
           tool_calls=[pb.ToolCall(id="call_x", name="get_weather", arguments_json='{"city": "Oslo"}')]),
    pb.GenerateResponse(finished=pb.GenerationFinished(reason=pb.FINISH_REASON_TOOL_CALLS)),
]


def test_a_tool_call_turn_over_the_wire(recorder):
    servicer, address = recorder
    servicer.script = TOOL_TURN
    with connect(address) as client:
        stream = client.generate([("user", "Weather in Oslo?")], tools=[WEATHER], tool_choice="required",
                                 enable_thinking=False)
        deltas = [e.delta for e in stream if e.HasField("delta")]
    assert [d.reasoning for d in deltas] == ["hmm", ""]
    assert [c.name for c in deltas[1].tool_call_deltas] == ["get_weather"]
    result = stream.result
    assert result.finish_reason == pb.FINISH_REASON_TOOL_CALLS and result.reasoning == "hmm"
    assert [json.loads(c.arguments_json) for c in result.tool_calls] == [{"city": "Oslo"}]
    sent = servicer.requests[0].chat
    assert sent.tools[0].name == "get_weather" and sent.tool_choice.mode == pb.TOOL_CHOICE_MODE_REQUIRED
    assert sent.enable_thinking is False


async def test_a_tool_call_turn_in_asyncio(recorder):
    servicer, address = recorder
    servicer.script = TOOL_TURN
    async with aio.connect(address) as client:
        result = await client.generate([("user", "Weather in Oslo?")], tools=[WEATHER],
                                       tool_choice={"function_name": "get_weather"}).collect()
    assert result.finish_reason == pb.FINISH_REASON_TOOL_CALLS
    assert [c.id for c in result.tool_calls] == [c.id for c in result.streamed_tool_calls] == ["call_x"]
    assert servicer.requests[0].chat.tool_choice.function_name == "get_weather"


def test_client_default_priority(recorder):
    servicer, address = recorder
    with connect(address, priority=-20) as client:
        client.generate("hi").collect()
        client.generate("hi", priority=30).collect()  # a request's own priority wins
        client.embed(["a", "b"])
        client.embed("a", priority=5)
    with connect(address) as client:
        client.generate("hi").collect()
    assert servicer.priorities == [-20, 30, -20, 5, 0]
    with pytest.raises(ValueError, match="priority"):
        connect(address, priority=101)


def test_rerank_over_the_wire(recorder):
    servicer, address = recorder
    servicer.refusals = 1  # refused once with RetryInfo: retried like the other unary calls
    retries = []
    with connect(address, priority=-20, on_retry=lambda d, delay: retries.append(delay)) as client:
        reply = client.rerank("q", ["bb", "a", "cccc"], truncate="none", request_id="r-1")
        top = client.rerank("q", ["bb", "a", "cccc"], model="other", top_n=2, priority=7)
    assert isinstance(reply, pb.RerankResponse) and reply.model == "reranker"
    assert [(r.index, r.score, r.tokens) for r in reply.results] == [(2, 3.5, 5), (0, 1.5, 3), (1, 0.5, 4)]
    assert top.model == "other" and list(top.results) == list(reply.results[:2])
    assert retries == [0.2]
    first, again, second = servicer.requests
    assert first == again  # the same request, its id included, for every attempt
    assert (first.query, list(first.documents), first.truncate, first.request_id) == (
        "q", ["bb", "a", "cccc"], pb.TRUNCATION_NONE, "r-1")
    assert (second.model, second.top_n) == ("other", 2)
    assert servicer.priorities == [-20, -20, 7]  # the client's default, unless the request has its own


def test_classify_over_the_wire(recorder):
    servicer, address = recorder
    servicer.refusals = 1  # refused once with RetryInfo: retried like the other unary calls
    retries = []
    with connect(address, priority=-20, on_retry=lambda d, delay: retries.append(delay)) as client:
        reply = client.classify(["0123456789ab", "abc"], truncate="none", request_id="c-1")
        top = client.classify("abc", model="other", top_k=1, priority=7)
    assert isinstance(reply, pb.ClassifyResponse) and reply.model == "classifier"
    assert [r.index for r in reply.results] == [0, 1] and [r.tokens for r in reply.results] == [14, 5]
    assert [(s.label, round(s.score, 3)) for s in reply.results[1].labels] == [("short", 0.7), ("long", 0.3)]
    assert top.model == "other" and [s.label for s in top.results[0].labels] == ["short"]
    assert retries == [0.2]
    first, again, second = servicer.requests
    assert first == again  # the same request, its id included, for every attempt
    assert (list(first.inputs), first.truncate, first.request_id) == (["0123456789ab", "abc"], pb.TRUNCATION_NONE, "c-1")
    assert (second.model, second.top_k, list(second.inputs)) == ("other", 1, ["abc"])
    assert servicer.priorities == [-20, -20, 7]  # the client's default, unless the request has its own


async def test_classify_in_asyncio(recorder):
    servicer, address = recorder
    async with aio.connect(address, priority=3) as client:
        reply = await client.classify(["a", "0123456789"], top_k=1, truncate=pb.TRUNCATION_END)
    assert [[s.label for s in r.labels] for r in reply.results] == [["short"], ["long"]]
    (request,) = servicer.requests
    assert (request.top_k, request.truncate, request.priority) == (1, pb.TRUNCATION_END, 3)


def test_prefetch_and_close_session_over_the_wire(recorder):
    servicer, address = recorder
    servicer.refusals = 1  # refused once with RetryInfo: retried like the other unary calls
    retries = []
    with connect(address, token="t", timeout=30, on_retry=lambda d, delay: retries.append(delay)) as client:
        reply = client.prefetch([("user", "hi")], session_id="open", adapter="tone", model="m")
        assert client.close_session("open") == 2 and client.close_session("other", model="m") == 0
    assert (reply.prompt_tokens, reply.cached_tokens, reply.tier) == (10, 8, pb.CACHE_TIER_DISK)
    assert retries == [0.2]
    first, again, opened, other = servicer.requests
    assert first == again and first.chat.messages[0].content == "hi"
    assert (first.model, first.session_id, first.adapter) == ("m", "open", "tone")
    assert (opened.model, opened.session_id, other.model, other.session_id) == ("", "open", "m", "other")
    meta, remaining = servicer.seen[0]
    assert meta["authorization"] == "Bearer t" and 20 < remaining < 31


async def test_prefetch_and_close_session_in_asyncio(recorder):
    servicer, address = recorder
    async with aio.connect(address) as client:
        reply = await client.prefetch("some text", session_id="open")
        assert await client.close_session("open") == 2
    assert reply.tier == pb.CACHE_TIER_DISK
    assert (servicer.requests[0].text, servicer.requests[0].session_id) == ("some text", "open")


async def test_rerank_in_asyncio(recorder):
    servicer, address = recorder
    async with aio.connect(address, priority=3) as client:
        reply = await client.rerank("q", ["a", "bbb"], top_n=1, truncate=pb.TRUNCATION_END)
        await client.embed(["a"], truncate="none")
    assert [(r.index, r.score) for r in reply.results] == [(1, 2.5)]
    rerank, embed = servicer.requests
    assert (rerank.top_n, rerank.truncate, rerank.priority) == (1, pb.TRUNCATION_END, 3)
    assert embed.truncate == pb.TRUNCATION_NONE
    assert servicer.priorities == [3, 3]


def test_packed_embed_over_the_wire(recorder):
    servicer, address = recorder
    with connect(address) as client:
        got = client.embed(["a", "b", "c"], packed=True, embedding_type="float32", truncate="none")
        plain = client.embed(["a", "b"])
    assert isinstance(got, Embeddings) and got.messages == 2
    assert [list(v) for v in got] == [[0.0], [1.0], [2.0]] and got.tokens == [1, 2, 3]
    assert [r.index for r in plain] == [0, 1]  # without packed: the per-input responses, as before
    packed, unpacked = servicer.requests
    assert (packed.packed, packed.embedding_type, packed.truncate) == (
        True, pb.EMBEDDING_TYPE_FLOAT32, pb.TRUNCATION_NONE)
    assert (unpacked.packed, unpacked.embedding_type) == (False, pb.EMBEDDING_TYPE_UNSPECIFIED)


async def test_packed_embed_in_asyncio(recorder):
    servicer, address = recorder
    async with aio.connect(address) as client:
        got = await client.embed([str(i) for i in range(5)], packed=True)
    assert [v[0] for v in got.vectors] == [0.0, 1.0, 2.0, 3.0, 4.0] and got.messages == 2
    assert servicer.requests[0].packed


def test_a_tenant_limit_is_retried_like_a_full_queue(recorder):
    servicer, address = recorder
    servicer.refusals = 1
    servicer.refusal = _refusal(code_pb2.RESOURCE_EXHAUSTED, 0.1, reason="TENANT_LIMIT")
    retries = []
    with connect(address, on_retry=lambda d, delay: retries.append((d.reason, delay))) as client:
        assert client.generate("hi").collect().finish_reason == pb.FINISH_REASON_LENGTH
    assert retries == [("TENANT_LIMIT", 0.1)] and len(servicer.generate_ids) == 2


@pytest.mark.parametrize("setup", ["no_retry_info", "spent", "past_deadline", "after_first_event", "off",
                                   "admin_role_required"])
def test_refusals_that_are_not_retried(recorder, setup):
    servicer, address = recorder
    servicer.refusals = 5
    attempts, timeout = 3, 30
    if setup == "no_retry_info":  # the server did not say when: the caller decides
        servicer.refusal = _refusal(code_pb2.RESOURCE_EXHAUSTED, None)
    elif setup == "past_deadline":
        servicer.refusal = _refusal(code_pb2.UNAVAILABLE, 5.0)
        timeout = 1
    elif setup == "after_first_event":  # the generation had begun: retrying would repeat it
        servicer.refuse_after_started = True
    elif setup == "off":
        attempts = 1
    elif setup == "admin_role_required":  # not allowed: waiting changes nothing
        servicer.refusal = _refusal(code_pb2.PERMISSION_DENIED, 0.2, reason="ADMIN_ROLE_REQUIRED")
    with connect(address, timeout=timeout, max_attempts=attempts) as client:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            client.generate("hi").collect()
    expected = 3 if setup == "spent" else 1
    assert len(servicer.generate_ids) == expected
    assert info.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE,
                                 grpc.StatusCode.PERMISSION_DENIED)
    assert time.monotonic() - started < 0.2 * expected + 1


async def test_unary_calls_retry_in_asyncio(recorder):
    servicer, address = recorder
    async with aio.connect(address, max_attempts=2) as client:
        with pytest.raises(grpc.aio.AioRpcError):  # Cancel always refuses: two attempts, 2 s apart
            started = time.monotonic()
            await client.cancel("x")
    assert time.monotonic() - started >= 2.0
    assert len(servicer.cancels) == 2


def test_load_unload_and_statuses_over_the_wire(recorder):
    servicer, address = recorder
    servicer.refusals = 1  # refused once with RetryInfo before any step: retried
    retries, steps = [], []
    with connect(address, token="adm", timeout=30, on_retry=lambda d, delay: retries.append(delay)) as client:
        info = client.load_model("m", "dir/m", kind="embedding", context_length=512, keep_alive=0,
                                 on_progress=steps.append)
        unloaded = client.unload_model("m", cancel_requests=True)
        kept = client.unload_model("m")
        statuses = client.model_statuses()
        assert [m.name for m in client.list_models()] == ["ready"]
    assert isinstance(info, pb.ModelInfo) and (info.name, info.kind) == ("m", pb.MODEL_KIND_EMBEDDING)
    assert [s.stage for s in steps] == list(_Recorder.LOAD_STAGES)
    assert list(steps[1].evicted) == ["idle-one"] and (steps[2].done, steps[2].total) == (5, 10)
    assert retries == [0.2]
    first, again, unload, unload_kept = servicer.requests
    assert first == again and (first.name, first.source, first.kind) == ("m", "dir/m", pb.MODEL_KIND_EMBEDDING)
    assert first.options.context_length == 512 and first.HasField("keep_alive_seconds")
    assert (unload.name, unload.cancel_requests, unload_kept.cancel_requests) == ("m", True, False)
    assert (unloaded.name, unloaded.freed_bytes, unloaded.state) == ("m", 1234, pb.MODEL_STATE_UNLOADED)
    assert [(s.name, s.state) for s in statuses] == [("ready", pb.MODEL_STATE_READY), ("lazy", pb.MODEL_STATE_UNLOADED)]
    assert statuses[1].on_demand and statuses[1].keep_alive_seconds == 30
    meta, remaining = servicer.seen[0]
    assert meta["authorization"] == "Bearer adm" and 20 < remaining < 31


def test_load_model_progress_and_a_stream_without_serving(recorder):
    servicer, address = recorder
    with connect(address) as client:
        stages = [s.stage for s in client.load_model_progress("m", "dir/m")]
        assert stages == list(_Recorder.LOAD_STAGES)
        with pytest.raises(RuntimeError, match="without SERVING"):
            client.load_model("m", "partial")
        for _ in client.load_model_progress("m", "dir/m"):
            break  # leaving early cancels the call
    assert [r.source for r in servicer.requests] == ["dir/m", "partial", "dir/m"]


async def test_load_unload_and_statuses_in_asyncio(recorder):
    servicer, address = recorder
    servicer.refusals = 1
    heard = []

    async def on_progress(step):
        heard.append(step.stage)

    async with aio.connect(address) as client:
        info = await client.load_model("a", "dir/a", on_progress=on_progress)
        stages = [s.stage async for s in client.load_model_progress("b", "dir/b", keep_alive=-1)]
        with pytest.raises(RuntimeError, match="without SERVING"):
            await client.load_model("c", "partial", on_progress=lambda step: heard.append(step.stage))
        unloaded = await client.unload_model("a", cancel_requests=True)
        statuses = await client.model_statuses()
    assert info.name == "a" and heard == [*_Recorder.LOAD_STAGES, pb.LOAD_STAGE_RESOLVING]
    assert stages == list(_Recorder.LOAD_STAGES)
    assert (unloaded.name, unloaded.state) == ("a", pb.MODEL_STATE_UNLOADED)
    assert [s.name for s in statuses] == ["ready", "lazy"]
    first, again, b, c, unload = servicer.requests
    assert first == again and b.keep_alive_seconds == -1 and c.source == "partial" and unload.cancel_requests


def test_image_part_from_bytes_and_path(tmp_path):
    from pathlib import Path

    from mlxgrpc_client import image_part, sniff_media_type

    gradient = Path(__file__).resolve().parents[2] / "testdata" / "gradient.png"
    data = gradient.read_bytes()
    from_path = image_part(gradient)
    assert (from_path.image.data, from_path.image.media_type) == (data, "image/png")
    assert image_part(str(gradient)) == from_path == image_part(data)
    assert image_part(b"\xff\xd8\xff\xe0rest").image.media_type == "image/jpeg"
    assert image_part(b"RIFF\0\0\0\0WEBPVP8 ").image.media_type == "image/webp"
    assert image_part(b"GIF89a...").image.media_type == "image/gif"
    assert image_part(b"anything", "image/png").image.media_type == "image/png"  # the caller's word
    with pytest.raises(ValueError):
        sniff_media_type(b"hello")
    chat = generate_request([{"role": "user", "parts": [from_path, "What is in the picture?"]}]).chat
    parts = chat.messages[0].parts
    assert [p.WhichOneof("part") for p in parts] == ["image", "text"]
    assert parts[1].text == "What is in the picture?"


def test_video_part_from_bytes_and_path(tmp_path):
    from pathlib import Path

    from mlxgrpc_client import sniff_video_media_type, video_part

    clip = Path(__file__).resolve().parents[2] / "testdata" / "clip.mp4"
    data = clip.read_bytes()
    from_path = video_part(clip)
    assert (from_path.video.data, from_path.video.media_type) == (data, "video/mp4")
    assert video_part(str(clip)) == from_path == video_part(data)
    # an ISO base media file's first box: ftyp (QuickTime when its brand is "qt  "), moov, mdat, wide, free
    assert sniff_video_media_type(b"\0\0\0\x14ftypisom\0\0\x02\0") == "video/mp4"
    assert sniff_video_media_type(b"\0\0\0\x14ftypqt  \0\0\x02\0") == "video/quicktime"
    for box in (b"moov", b"mdat", b"wide", b"free"):
        assert sniff_video_media_type(b"\0\0\0\x08" + box) == "video/mp4"
    ebml = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01\x42\x82\x84"
    assert video_part(ebml + b"webm\x42\x87").video.media_type == "video/webm"
    assert video_part(ebml + b"matroska").video.media_type == "video/x-matroska"
    assert video_part(ebml + bytes(60) + b"webm").video.media_type == "video/x-matroska"  # past the first 64 bytes
    assert video_part(b"RIFF\0\0\0\0AVI LIST").video.media_type == "video/x-msvideo"
    assert video_part(b"anything", "video/webm").video.media_type == "video/webm"  # the caller's word
    for other in (b"hello", b"RIFF\0\0\0\0WEBPVP8 ", b"\x89PNG\r\n\x1a\n", b""):
        with pytest.raises(ValueError):
            sniff_video_media_type(other)
    gif = tmp_path / "photo.gif"
    gif.write_bytes(b"GIF89a...")
    with pytest.raises(ValueError):
        video_part(gif)  # an image is no video
    chat = generate_request([{"role": "user", "parts": [from_path, "What happens in the video?"]}]).chat
    parts = chat.messages[0].parts
    assert [p.WhichOneof("part") for p in parts] == ["video", "text"]
    assert parts[0].video.data == data and parts[1].text == "What happens in the video?"


def test_audio_part_from_bytes_and_path(tmp_path):
    from pathlib import Path

    from mlxgrpc_client import audio, audio_part, image_part

    testdata = Path(__file__).resolve().parents[2] / "testdata"
    speech = testdata / "speech.wav"
    data = speech.read_bytes()
    from_path = audio_part(speech)
    assert from_path.WhichOneof("part") == "audio"
    assert (from_path.audio.data, from_path.audio.media_type) == (data, "audio/wav")
    assert audio_part(str(speech)) == from_path == audio_part(data) == pb.ContentPart(audio=audio(speech))
    # sniffed as for Transcribe: FLAC, Ogg, MP3 (an ID3 tag or an MPEG frame's sync bits)
    assert audio_part(b"fLaC\0\0\0\x22").audio.media_type == "audio/flac"
    assert audio_part(b"OggS\0\x02").audio.media_type == "audio/ogg"
    assert audio_part(b"ID3\x04\0\0").audio.media_type == "audio/mpeg"
    assert audio_part(b"\xff\xfb\x90\x64").audio.media_type == "audio/mpeg"
    assert audio_part(data, "audio/mpeg").audio.media_type == "audio/mpeg"  # the caller's word
    png = tmp_path / "photo.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    for other in (png, b"hello", b""):
        with pytest.raises(ValueError):
            audio_part(other)  # no known signature and no media type
    gradient = image_part(testdata / "gradient.png")
    chat = generate_request([{"role": "user", "parts": [from_path, gradient, "What is said about the picture?"]}]).chat
    parts = chat.messages[0].parts
    assert [p.WhichOneof("part") for p in parts] == ["audio", "image", "text"]
    assert parts[0].audio.data == data and parts[1] == gradient and parts[2].text == "What is said about the picture?"
