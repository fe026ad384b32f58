"""The chat output splitter: every parser fed any split of a recorded output (token by
token or at random cuts) gives what the whole text gives, and that is the parse mlx-lm's
own tool parser makes of the call text."""

from __future__ import annotations

import importlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.generation.frontend.chat.output import OutputSplitter
from engine.generation.frontend.chat.syntax import ChatSyntax, Marker
from engine.generation.frontend.chat.tools import tool_set
from engine.requests import ChatMessage, ChatPrompt, Tool

WEATHER = json.dumps({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                      "required": ["city"]})
TOOLS = (Tool("get_weather", "Weather in a city", WEATHER), Tool("get_time", "The time", ""))


def syntax(parser: str, thinking: bool = False) -> ChatSyntax:
    module = importlib.import_module(f"mlx_lm.tool_parsers.{parser}")
    think = dict(think_start=Marker("<think>", 3), think_end=Marker("</think>", 4)) if thinking else {}
    return ChatSyntax(parser, module.parse_tool_call, Marker(module.tool_call_start, 1),
                      Marker(module.tool_call_end, 2 if module.tool_call_end else None), **think)


def tools_for(s: ChatSyntax):
    return tool_set(ChatPrompt((ChatMessage("user", "hi"),), tools=TOOLS), s, "fixture")


# (parser, thinking, starts in reasoning, output text, expected answer, reasoning, calls as (name, arguments))
RECORDED = [
    ("json_tools", True, True,
     'Let me check.</think>\n\nSure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}'
     '\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
     "Sure.\n", "Let me check.", [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {})]),
    ("json_tools", True, False, "<think>hmm</think>The answer is 4.", "The answer is 4.", "hmm", []),
    ("json_tools", False, False, 'Text <tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call> end',
     'Text <tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>end', "", []),  # names no tool: text
    ("json_tools", False, False, '<tool_call>\n{"name": "get_weather", "arguments": {"days": 1}}\n</tool_call>',
     '<tool_call>\n{"name": "get_weather", "arguments": {"days": 1}}\n</tool_call>', "", []),  # invalid arguments
    ("json_tools", False, False, '<tool_call>\n{"name": "get_weather", "arguments": {"ci',
     '<tool_call>\n{"name": "get_weather", "arguments": {"ci', "", []),  # cut short: text
    ("mistral", False, False, 'On it.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}, '
     '{"name": "get_time", "arguments": {}}]', "On it.", "",
     [("get_weather", {"city": "Oslo"}), ("get_time", {})]),
    ("pythonic", False, False, '<|tool_call_start|>[get_weather(city="Rome", days=3)]<|tool_call_end|>Done.',
     "Done.", "", [("get_weather", {"city": "Rome", "days": 3})]),
    ("pythonic", False, False, "No tools <|tool_call_start|>[broken(<|tool_call_end|>",
     "No tools <|tool_call_start|>[broken(<|tool_call_end|>", "", []),
    ("json_tools", True, False, "plain <thi but not a marker", "plain <thi but not a marker", "", []),
]


def run(parser, thinking, in_reasoning, pieces):
    s = syntax(parser, thinking)
    splitter = OutputSplitter(s, tools_for(s), in_reasoning=in_reasoning)
    parts = [splitter.feed(p) for p in pieces] + [splitter.finish()]
    text = "".join(p.text for p in parts)
    reasoning = "".join(p.reasoning for p in parts)
    calls = [c for p in parts for c in p.calls]
    deltas = [d for p in parts for d in p.deltas]
    return text, reasoning, calls, deltas, splitter


@pytest.mark.parametrize("case", RECORDED, ids=lambda c: f"{c[0]}:{c[3][:24]}")
def test_whole_text_parse(case):
    parser, thinking, in_reasoning, output, answer, reasoning, expected = case
    text, got_reasoning, calls, deltas, splitter = run(parser, thinking, in_reasoning, [output])
    assert (text, got_reasoning) == (answer, reasoning)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == expected
    assert splitter.calls == len(expected)
    for index, call in enumerate(calls):
        mine = [d for d in deltas if d.index == index]
        assert mine[0].id == call.id and mine[0].name == call.name and call.id.startswith("call_")
        assert json.loads("".join(d.arguments for d in mine)) == json.loads(call.arguments)


@pytest.mark.parametrize("case", RECORDED, ids=lambda c: f"{c[0]}:{c[3][:24]}")
def test_character_by_character_equals_whole(case):
    parser, thinking, in_reasoning, output, *_ = case
    whole = run(parser, thinking, in_reasoning, [output])
    pieces = run(parser, thinking, in_reasoning, list(output))
    assert pieces[:2] == whole[:2]
    assert [(c.name, c.arguments) for c in pieces[2]] == [(c.name, c.arguments) for c in whole[2]]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(RECORDED), st.lists(st.integers(0, 400), max_size=12))
def test_any_split_equals_whole(case, cuts):
    parser, thinking, in_reasoning, output, *_ = case
    cuts = sorted({c % (len(output) + 1) for c in cuts})
    pieces = [output[a:b] for a, b in zip([0, *cuts], [*cuts, len(output)])]
    whole = run(parser, thinking, in_reasoning, [output])
    split = run(parser, thinking, in_reasoning, pieces)
    assert split[:2] == whole[:2]
    assert [(c.name, c.arguments) for c in split[2]] == [(c.name, c.arguments) for c in whole[2]]
    for index, call in enumerate(split[2]):  # streamed pieces rebuild each call's arguments
        assert json.loads("".join(d.arguments for d in split[3] if d.index == index)) == json.loads(call.arguments)


def test_json_arguments_stream_before_the_call_closes():
    s = syntax("json_tools")
    splitter = OutputSplitter(s, tools_for(s))
    early = splitter.feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par')
    assert early.deltas[0].name == "get_weather" and early.deltas[1].arguments == '{"city": "Par'
    assert not early.calls and not early.text
    late = splitter.feed('is"}}\n</tool_call>')
    assert "".join(d.arguments for d in late.deltas) == 'is"}' and late.calls[0].arguments == '{"city": "Paris"}'


def test_without_tools_call_markup_is_text():
    s = syntax("json_tools", thinking=True)
    splitter = OutputSplitter(s, None)
    out = splitter.feed('<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    out_text = out.text + splitter.finish().text
    assert out_text.startswith("<tool_call>") and splitter.calls == 0
