"""Tools and reasoning through the live server: tool choice enforced by the grammar
(every call validates against its schema), the output split into answer, reasoning
and calls, batched rows equal to alone, and every bad input refused with its field."""

from __future__ import annotations

import asyncio
import json

import grpc
import jsonschema
import pytest

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import model_pb2 as model_pb
from tests.conftest import TOOLS
from tests.helpers import details

pytestmark = pytest.mark.asyncio(loop_scope="session")

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"]}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "required": ["zone"]}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
TOOL_DEFS = [gen_pb.Tool(name=n, description=f"{n} of a place", parameters_json_schema=json.dumps(s))
             for n, s in SCHEMAS.items()]


def chat(mode=gen_pb.TOOL_CHOICE_MODE_REQUIRED, *, function="", thinking=False, tools=TOOL_DEFS, parallel=False,
         messages=None, **kw) -> gen_pb.ChatMessages:
    c = gen_pb.ChatMessages(messages=messages or [gen_pb.ChatMessage(role="user", content="Weather in Paris?")],
                            tools=tools, tool_choice=gen_pb.ToolChoice(mode=mode, function_name=function),
                            parallel_tool_calls=parallel, **kw)
    if thinking is not None:
        c.enable_thinking = thinking
    return c


def request(c: gen_pb.ChatMessages, *, model=TOOLS, seed=None, max_tokens=64, **kw) -> pb.GenerateRequest:
    sampling = gen_pb.SamplingParams(temperature=1.0, seed=seed) if seed is not None else None
    return pb.GenerateRequest(model=model, chat=c, sampling=sampling,
                              stopping=gen_pb.StoppingCriteria(max_tokens=max_tokens), **kw)


async def run(stub, req):
    out = {"text": "", "reasoning": "", "calls": [], "deltas": [], "ids": []}
    async for msg in stub.Generate(req):
        if msg.HasField("delta"):
            d = msg.delta
            out["text"] += d.text
            out["reasoning"] += d.reasoning
            out["calls"] += list(d.tool_calls)
            out["deltas"] += list(d.tool_call_deltas)
            out["ids"] += list(d.token_ids)
        elif msg.HasField("finished"):
            out["reason"] = msg.finished.reason
        else:
            out["prompt_tokens"] = msg.started.prompt_tokens
    return out


async def test_model_info_describes_tool_calling_and_thinking(stub):
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model=TOOLS))).info.capabilities.chat
    assert (info.tool_calling, info.tool_parser, info.tool_choice_enforced) == (True, "json_tools", True)
    assert (info.tool_call_start, info.tool_call_end) == ("<tool_call>", "</tool_call>")
    assert (info.reasoning_start, info.reasoning_end) == ("<think>", "</think>")
    plain = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"))).info.capabilities.chat
    assert plain == model_pb.ChatCapabilities()


async def test_required_calls_validate_against_their_schemas(stub):
    outs = await asyncio.gather(*(run(stub, request(chat(), seed=seed)) for seed in range(20)))
    for out in outs:
        assert out["reason"] == gen_pb.FINISH_REASON_TOOL_CALLS, out
        assert out["text"] == "" and out["reasoning"] == "" and len(out["calls"]) == 1
        call = out["calls"][0]
        jsonschema.validate(json.loads(call.arguments_json), SCHEMAS[call.name])
        assert call.id.startswith("call_")
        pieces = [d for d in out["deltas"] if d.index == 0]
        assert (pieces[0].id, pieces[0].name) == (call.id, call.name)
        assert json.loads("".join(d.arguments_json for d in pieces)) == json.loads(call.arguments_json)
    assert len({o["calls"][0].arguments_json for o in outs}) > 1  # seeds differ, so calls do


async def test_a_named_function_is_always_that_one(stub):
    outs = await asyncio.gather(*(run(stub, request(chat(gen_pb.TOOL_CHOICE_MODE_FUNCTION, function="get_time"),
                                                    seed=seed)) for seed in range(10)))
    for out in outs:
        assert [c.name for c in out["calls"]] == ["get_time"]
        jsonschema.validate(json.loads(out["calls"][0].arguments_json), TIME)


async def test_parallel_calls_are_each_complete(stub):
    out = await run(stub, request(chat(parallel=True), max_tokens=120))
    assert len(out["calls"]) >= 2  # random weights prefer another call over the quiet end token
    for call in out["calls"]:
        jsonschema.validate(json.loads(call.arguments_json), SCHEMAS[call.name])
    assert sorted({d.index for d in out["deltas"]})[: len(out["calls"])] == list(range(len(out["calls"])))


async def test_none_never_calls(stub):
    out = await run(stub, request(chat(gen_pb.TOOL_CHOICE_MODE_NONE), max_tokens=24))
    assert out["calls"] == [] and out["reason"] == gen_pb.FINISH_REASON_LENGTH
    assert len(out["ids"]) == 24 and "<tool_call>" not in out["text"] and out["text"]


async def test_reasoning_is_kept_apart_and_enable_thinking_removes_it(stub):
    think_end = (await stub.Tokenize(pb.TokenizeRequest(model=TOOLS, text="</think>"))).token_ids
    assert len(think_end) == 1
    fmt = gen_pb.ResponseFormat(grammar=f'start: "Let me see." <[{think_end[0]}]> "Paris."')
    opened = await run(stub, request(chat(gen_pb.TOOL_CHOICE_MODE_NONE, thinking=None), response_format=fmt))
    assert (opened["reasoning"], opened["text"]) == ("Let me see.", "Paris.")
    free = await run(stub, request(chat(gen_pb.TOOL_CHOICE_MODE_NONE, thinking=None), max_tokens=12))
    assert free["text"] == "" and free["reasoning"]  # the template opened thinking; it never closed
    off = await run(stub, request(chat(gen_pb.TOOL_CHOICE_MODE_NONE, thinking=False), max_tokens=12))
    assert off["reasoning"] == "" and off["text"]


async def test_batched_rows_equal_alone(stub):
    plain = pb.GenerateRequest(model=TOOLS, chat=gen_pb.ChatMessages(
        messages=[gen_pb.ChatMessage(role="user", content="Tell me a story.")], enable_thinking=False),
        stopping=gen_pb.StoppingCriteria(max_tokens=20))
    fmt = request(chat(gen_pb.TOOL_CHOICE_MODE_NONE), response_format=gen_pb.ResponseFormat(regex="[a-z]{4,12}"))
    rows = [request(chat(), seed=3), request(chat(gen_pb.TOOL_CHOICE_MODE_FUNCTION, function="get_time")),
            plain, fmt, request(chat(gen_pb.TOOL_CHOICE_MODE_AUTO, thinking=None), max_tokens=16),
            pb.GenerateRequest(model="llama", text="Hello", stopping=gen_pb.StoppingCriteria(max_tokens=12))]
    alone = [await run(stub, r) for r in rows]
    together = await asyncio.gather(*(run(stub, r) for r in rows))
    for a, b in zip(alone, together):
        assert (a["ids"], a["text"], a["reasoning"], [c.arguments_json for c in a["calls"]], a["reason"]) == \
               (b["ids"], b["text"], b["reasoning"], [c.arguments_json for c in b["calls"]], b["reason"])


async def test_speculation_does_not_change_an_enforced_call(stub):
    base = await run(stub, request(chat()))
    spec = await run(stub, request(chat(), speculation=gen_pb.SpeculationOptions(mode=gen_pb.SPECULATION_MODE_NGRAM)))
    assert base["ids"] == spec["ids"] and [c.arguments_json for c in spec["calls"]] == \
           [c.arguments_json for c in base["calls"]]


async def test_tool_results_render_into_the_next_turn(stub):
    first = await run(stub, request(chat()))
    call = first["calls"][0]
    history = [gen_pb.ChatMessage(role="user", content="Weather in Paris?"),
               gen_pb.ChatMessage(role="assistant", tool_calls=[call]),
               gen_pb.ChatMessage(role="tool", tool_call_id=call.id,
                                  parts=[gen_pb.ContentPart(text='{"temperature": 21}')])]
    second = await run(stub, request(chat(gen_pb.TOOL_CHOICE_MODE_NONE, messages=history), max_tokens=8))
    assert second["prompt_tokens"] > first["prompt_tokens"] + len(first["ids"]) and second["text"]
    tokens = (await stub.Tokenize(pb.TokenizeRequest(model=TOOLS, text="<tool_response>"))).token_ids
    assert len(tokens) == 1


BAD = [
    (dict(tools=[gen_pb.Tool(name="bad name")]), "chat.tools[0].name"),
    (dict(tools=[gen_pb.Tool(name="f", parameters_json_schema="{nope")]), "chat.tools[0].parameters_json_schema"),
    (dict(tools=[gen_pb.Tool(name="f", parameters_json_schema='{"type": 7}')]),
     "chat.tools[0].parameters_json_schema"),
    (dict(tools=[gen_pb.Tool(name="f"), gen_pb.Tool(name="f")]), "chat.tools[1].name"),
    (dict(mode=gen_pb.TOOL_CHOICE_MODE_FUNCTION, function="nope"), "chat.tool_choice.function_name"),
    (dict(tools=[]), "chat.tool_choice.mode"),
    (dict(template_kwargs={"x": "not json"}), "chat.template_kwargs[x]"),
    (dict(template_kwargs={"tokenize": "true"}), "chat.template_kwargs[tokenize]"),
    (dict(messages=[gen_pb.ChatMessage(role="user", content="a", parts=[gen_pb.ContentPart(text="b")])]),
     "chat.messages[0].parts"),
    (dict(messages=[gen_pb.ChatMessage(role="assistant", tool_calls=[gen_pb.ToolCall(name="f", arguments_json="[1]")])]),
     "chat.messages[0].tool_calls[0].arguments_json"),
]


@pytest.mark.parametrize("changes,field", BAD, ids=[f for _, f in BAD])
async def test_bad_input_is_invalid_argument_naming_the_field(stub, changes, field):
    changes = dict(changes)
    mode = changes.pop("mode", gen_pb.TOOL_CHOICE_MODE_REQUIRED)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await run(stub, request(chat(mode, **changes)))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert details(err.value)["BadRequest"].field_violations[0].field == field


async def test_required_with_a_response_format_is_refused(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await run(stub, request(chat(), response_format=gen_pb.ResponseFormat(regex="a+")))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "response_format" in err.value.details()


async def test_tools_on_a_model_without_tool_calling_fail_precondition(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await run(stub, request(chat(gen_pb.TOOL_CHOICE_MODE_AUTO), model="llama"))
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "'llama'" in err.value.details() and "tool calling" in err.value.details()
