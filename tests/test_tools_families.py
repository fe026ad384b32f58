"""Each tool-call family (Qwen-style JSON, Mistral, pythonic) on its own fixture: calls
forced by tool choice validate 20 times out of 20 and parse back as what the grammar
wrote; and the family's own template, rendering a call, is read back as that call."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest

from engine.events import Delta, Finished, FinishReason
from engine.generation.frontend.chat.output import OutputSplitter
from engine.generation.frontend.chat.syntax import chat_syntax
from engine.generation.frontend.chat.tools import tool_set
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import (
    ChatMessage,
    ChatPrompt,
    GenerationRequest,
    SamplingOptions,
    StopOptions,
    Tool,
    ToolCall,
    ToolChoiceMode,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer",
          "minimum": 1, "maximum": 9}}, "required": ["city", "days"]}
TOOLS = (Tool("get_weather", "Weather", json.dumps(SCHEMA)), Tool("ping", "Ping", ""))
FAMILIES = ("qwen", "mistral", "pythonic")


@pytest.fixture(scope="module", params=FAMILIES)
async def engine(request, chat_models):
    e = GenerationEngine(str(chat_models[request.param]), name=request.param)
    await e.start()
    yield e
    await e.close()


async def run(e, prompt: ChatPrompt, seed: int):
    req = GenerationRequest(prompt, sampling=SamplingOptions(temperature=1.0, seed=seed),
                            stopping=StopOptions(max_tokens=80))
    calls, reason = [], None
    async for event in e.generate(req):
        if isinstance(event, Delta):
            calls += event.tool_calls
        elif isinstance(event, Finished):
            reason = event.reason
    return calls, reason


def prompt(choice=ToolChoiceMode.REQUIRED, function=""):
    return ChatPrompt((ChatMessage("user", "Weather in Oslo for 3 days?"),), tools=TOOLS, tool_choice=choice,
                      function=function, parallel_tool_calls=False, enable_thinking=False)


async def test_required_calls_validate_twenty_of_twenty(engine):
    assert engine.describe().capabilities.chat.tool_choice_enforced
    results = await asyncio.gather(*(run(engine, prompt(), seed) for seed in range(20)))
    for calls, reason in results:
        assert reason is FinishReason.TOOL_CALLS and len(calls) == 1
        schema = SCHEMA if calls[0].name == "get_weather" else {"type": "object", "additionalProperties": False}
        jsonschema.validate(json.loads(calls[0].arguments), schema)


async def test_named_function(engine):
    results = await asyncio.gather(*(run(engine, prompt(ToolChoiceMode.FUNCTION, "get_weather"), seed)
                                     for seed in range(5)))
    assert all([c.name for c in calls] == ["get_weather"] for calls, _ in results)


async def test_the_template_rendering_a_call_reads_back_as_that_call(engine):
    m = engine.loaded
    syntax = chat_syntax(m.tokenizer)
    call = ToolCall("call_7", "get_weather", json.dumps({"city": "Oslo", "days": 3}))
    tools = tool_set(prompt(), syntax, m.name)
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": call.id, "type": "function",
                     "function": {"name": call.name, "arguments": json.loads(call.arguments)}}]}]
    rendered = m.tokenizer.apply_chat_template(messages, tools=tools.template_tools(), tokenize=False)
    start = rendered.rindex(syntax.call_start.text)  # the assistant's (a system prompt may show the syntax)
    end = rendered.index(syntax.call_end.text, start) + len(syntax.call_end.text) if syntax.call_end.text \
        else rendered.index("]<|endoftext|>", start) + 1  # Mistral: the call runs to the end
    splitter = OutputSplitter(syntax, tools)
    parts = [splitter.feed(ch) for ch in rendered[start:end]] + [splitter.finish()]
    calls = [c for p in parts for c in p.calls]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [(call.name, json.loads(call.arguments))]
    assert "".join(p.text for p in parts) == ""
