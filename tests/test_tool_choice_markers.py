"""Tool choice through the engine on fixtures whose markers are not all single tokens
(qwen_split: ``<tool_call>`` is two ordinary tokens) and on the qwen3_coder and gemma4
syntaxes: REQUIRED and FUNCTION calls validate; NONE never writes a marker of several
tokens even where the logit bias pushes the model to; the capability says so."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest

from engine.errors import InvalidRequest
from engine.events import Delta, Finished, FinishReason
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import (
    ChatMessage,
    ChatPrompt,
    FormatKind,
    GenerationRequest,
    ResponseFormat,
    SamplingOptions,
    StopOptions,
    Tool,
    ToolChoiceMode,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 10}, "days": {"type": "integer", "minimum": 1, "maximum": 9},
    "unit": {"enum": ["celsius", "fahrenheit"]}, "flags": {"type": "array", "items": {"type": "boolean"},
                                                           "maxItems": 2}},
    "required": ["city", "days", "unit", "flags"]}
TOOLS = (Tool("get_weather", "Weather", json.dumps(SCHEMA)), Tool("ping", "Ping", ""))
FAMILIES = ("qwen_split", "qwen3_coder", "gemma4")


@pytest.fixture(scope="module")
async def engines(chat_models):
    started = {f: GenerationEngine(str(chat_models[f]), name=f) for f in FAMILIES}
    for e in started.values():
        await e.start()
    yield started
    for e in started.values():
        await e.close()


def chat(mode=ToolChoiceMode.REQUIRED, function="", tools=TOOLS, thinking=False) -> ChatPrompt:
    return ChatPrompt((ChatMessage("user", "Weather in Oslo for 3 days?"),), tools=tools, tool_choice=mode,
                      function=function, parallel_tool_calls=False, enable_thinking=thinking)


async def run(e, prompt: ChatPrompt, seed: int, max_tokens=200, bias=None, response_format=None):
    req = GenerationRequest(prompt, sampling=SamplingOptions(temperature=1.0, seed=seed, logit_bias=bias or {}),
                            stopping=StopOptions(max_tokens=max_tokens), response_format=response_format)
    out = {"text": "", "reasoning": "", "calls": [], "reason": None}
    async for event in e.generate(req):
        if isinstance(event, Delta):
            out["text"] += event.text
            out["reasoning"] += event.reasoning or ""
            out["calls"] += event.tool_calls
        elif isinstance(event, Finished):
            out["reason"] = event.reason
    return out


@pytest.mark.parametrize("family", FAMILIES)
async def test_required_calls_validate(engines, family):
    e = engines[family]
    chat_facts = e.describe().capabilities.chat
    assert chat_facts.tool_choice_enforced and chat_facts.tool_parser == family.replace("qwen_split", "json_tools")
    for out in await asyncio.gather(*(run(e, chat(), seed) for seed in range(8))):
        assert out["reason"] is FinishReason.TOOL_CALLS and len(out["calls"]) == 1, out
        call = out["calls"][0]
        schema = SCHEMA if call.name == "get_weather" else {"type": "object", "maxProperties": 0}
        jsonschema.validate(json.loads(call.arguments), schema)


@pytest.mark.parametrize("family", FAMILIES)
async def test_named_function(engines, family):
    outs = await asyncio.gather(*(run(engines[family], chat(ToolChoiceMode.FUNCTION, "get_weather"), seed)
                                  for seed in range(4)))
    for out in outs:
        assert [c.name for c in out["calls"]] == ["get_weather"], out
        jsonschema.validate(json.loads(out["calls"][0].arguments), SCHEMA)


def marker_bias(e) -> dict[int, float]:
    """Pushes the two tokens of ``<tool_call>``, quiet otherwise, over every other."""
    vocab = e.loaded.tokenizer.get_vocab()
    return {vocab["<tool"]: 100.0, vocab["_call>"]: 100.0}


async def test_none_never_writes_a_marker_of_several_tokens(engines):
    e = engines["qwen_split"]
    bias = marker_bias(e)
    free = await run(e, chat(ToolChoiceMode.AUTO, tools=()), 0, max_tokens=48, bias=bias)
    assert "<tool_call>" in free["text"]  # the bias alone writes the marker
    outs = await asyncio.gather(*(run(e, chat(ToolChoiceMode.NONE), seed, max_tokens=48, bias=bias)
                                  for seed in range(6)))
    for out in outs:
        assert "<tool_call>" not in out["text"] and not out["calls"], out
        assert out["text"].count("<tool") >= 8, out  # the model still writes the marker's tokens, never both


async def test_none_with_thinking_open_may_end_its_thought(engines):
    e = engines["qwen_split"]
    think_end = e.loaded.tokenizer.get_vocab()["</think>"]
    outs = await asyncio.gather(*(run(e, chat(ToolChoiceMode.NONE, thinking=True), seed, max_tokens=48,
                                      bias={**marker_bias(e), think_end: 100.0}) for seed in range(4)))
    for out in outs:
        assert out["text"] and "<tool_call>" not in out["text"] and "<tool_call>" not in out["reasoning"], out


async def test_none_and_a_response_format_refused_where_none_is_a_grammar(engines):
    fmt = ResponseFormat(FormatKind.JSON_OBJECT)
    with pytest.raises(InvalidRequest) as info:
        await run(engines["qwen_split"], chat(ToolChoiceMode.NONE), 0, response_format=fmt)
    assert info.value.field == "response_format"
    out = await run(engines["qwen3_coder"], chat(ToolChoiceMode.NONE), 0, max_tokens=16, response_format=fmt)
    assert out["reason"] is not None  # a one-token marker is banned by logit bias: the two combine
