"""Tool-choice grammars on the fixtures' own tokenizers, without a model: every output a
REQUIRED or FUNCTION grammar allows (random walks over its token masks) parses back with
mlx-lm's parser into valid calls, whatever the markers' tokenization; each fixture's
template, writing a call, is one the grammar allows; NONE's grammar allows any text and
partial markers but never the whole marker."""

from __future__ import annotations

import dataclasses
import importlib
import json
import random
from pathlib import Path

import numpy as np
import pytest
from llguidance import LLMatcher
from mlx_lm.tokenizer_utils import load as load_tokenizer

from engine.errors import InvalidRequest
from engine.generation.frontend.chat.choice import banned_tokens, enforceable, none_grammar, tool_grammar
from engine.generation.frontend.chat.output import OutputSplitter
from engine.generation.frontend.chat.syntax import ChatSyntax, Marker, chat_syntax
from engine.generation.frontend.chat.tools import tool_set
from engine.generation.grammar.compiler import grammar_tokenizer
from engine.requests import ChatMessage, ChatPrompt, Tool, ToolChoiceMode

SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 10}, "days": {"type": "integer", "minimum": 1, "maximum": 9},
    "unit": {"enum": ["celsius", "fahrenheit"]}, "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
    "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}, "required": ["deep"],
             "additionalProperties": False}}, "required": ["city", "days", "unit", "code", "tags", "opts"]}
TOOLS = (Tool("get_weather", "Weather", json.dumps(SCHEMA)), Tool("ping", "Ping", ""))
CALL = {"city": "Oslo", "days": 3, "unit": "celsius", "code": "OSL", "tags": ["a b", "c"], "opts": {"deep": True}}


@dataclasses.dataclass
class Fixture:
    tokenizer: object
    syntax: ChatSyntax
    grammar_tokenizer: object
    eos: int


@pytest.fixture(scope="module")
def fixtures(chat_models) -> dict[str, Fixture]:
    out = {}
    for family in ("qwen", "qwen_split", "qwen3_coder", "gemma4"):
        tok = load_tokenizer(Path(chat_models[family]))
        eos = sorted(tok.eos_token_ids)
        out[family] = Fixture(tok, chat_syntax(tok), grammar_tokenizer(tok, 640, frozenset(eos)), eos[0])
    split = out["qwen_split"]  # the other syntaxes with markers of several ordinary tokens
    plain = lambda text: Marker(text, None, (text,))
    for parser, start, end, quote in (("qwen3_coder", "<tool_call>", "</tool_call>", None),
                                      ("gemma4", "<|tool_call>", "<tool_call|>", plain('<|"|>'))):
        parse = importlib.import_module(f"mlx_lm.tool_parsers.{parser}").parse_tool_call
        syntax = dataclasses.replace(split.syntax, parser=parser, parse=parse, call_start=plain(start),
                                     call_end=plain(end), quote=quote)
        out[f"{parser}_plain"] = dataclasses.replace(split, syntax=syntax)
    return out


def prompt(mode=ToolChoiceMode.REQUIRED, function="", parallel=True, tools=TOOLS) -> ChatPrompt:
    return ChatPrompt((ChatMessage("user", "hi"),), tools=tools, tool_choice=mode, function=function,
                      parallel_tool_calls=parallel)


def matcher(f: Fixture, grammar: str) -> LLMatcher:
    m = LLMatcher(f.grammar_tokenizer, LLMatcher.grammar_from_lark(grammar), log_level=1)
    assert not m.is_error(), m.get_error()
    return m


def walk(m: LLMatcher, f: Fixture, rng: random.Random, limit: int = 2000) -> list[int]:
    """Random allowed tokens until the grammar ends (or, where it may, at random)."""
    ids = []
    for _ in range(limit):
        if m.is_stopped():
            return ids
        bits = np.unpackbits(np.frombuffer(m.compute_bitmask(), dtype=np.uint8), bitorder="little")
        allowed = [int(i) for i in np.flatnonzero(bits[:640]) if i != f.eos]
        if m.is_accepting() and (not allowed or rng.random() < 0.8):
            return ids
        ids.append(rng.choice(allowed))
        assert m.consume_token(ids[-1]), m.get_error()
    raise AssertionError(f"no end after {limit} tokens: {f.tokenizer.decode(ids)!r}")


def split(f: Fixture, text: str, tools, opens: bool = False):
    splitter = OutputSplitter(f.syntax, tools, in_reasoning=opens)
    parts = [splitter.feed(text), splitter.finish()]
    return [c for p in parts for c in p.calls], "".join(p.text for p in parts)


FAMILIES = ("qwen_split", "qwen3_coder", "gemma4", "qwen3_coder_plain", "gemma4_plain")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", [ToolChoiceMode.REQUIRED, ToolChoiceMode.FUNCTION])
def test_every_output_the_grammar_allows_parses_into_valid_calls(fixtures, family, mode):
    f = fixtures[family]
    assert enforceable(f.syntax)
    p = prompt(mode, "get_weather" if mode is ToolChoiceMode.FUNCTION else "")
    tools = tool_set(p, f.syntax, family)
    m, rng = matcher(f, tool_grammar(p, tools, f.syntax, False, family)), random.Random(7)
    for _ in range(12):
        text = f.tokenizer.decode(walk(m.deep_copy(), f, rng))
        calls, rest = split(f, text, tools)
        assert calls and not rest.strip(), text
        assert all(tools.valid(c.name, json.loads(c.arguments)) for c in calls), text
        if mode is ToolChoiceMode.FUNCTION:
            assert {c.name for c in calls} == {"get_weather"}


@pytest.mark.parametrize("family", ("qwen_split", "qwen3_coder", "gemma4"))
def test_the_template_writing_a_call_is_what_the_grammar_allows(fixtures, family):
    f = fixtures[family]
    tools = tool_set(prompt(), f.syntax, family)
    messages = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": CALL}}]}]
    rendered = f.tokenizer.apply_chat_template(messages, tools=tools.template_tools(), tokenize=False)
    start = rendered.rindex(f.syntax.call_start.text)
    text = rendered[start:rendered.index(f.syntax.call_end.text, start) + len(f.syntax.call_end.text)]
    ids = f.tokenizer.encode(text, add_special_tokens=False) + [f.eos]
    m = matcher(f, tool_grammar(prompt(), tools, f.syntax, False, family))
    assert m.validate_tokens(ids) == len(ids), text
    calls, rest = split(f, text, tools)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", CALL)] and rest == ""


def test_a_thought_then_a_call_with_markers_of_several_tokens(fixtures):
    f = fixtures["qwen_split"]
    tools = tool_set(prompt(), f.syntax, "m")
    m = matcher(f, tool_grammar(prompt(), tools, f.syntax, True, "m"))
    call = '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'
    enc = lambda text: f.tokenizer.encode(text, add_special_tokens=False)
    for ids in (enc("thinking <tool_ca") + enc("</think>\n\n" + call), enc(call)):
        assert m.deep_copy().validate_tokens(ids + [f.eos]) == len(ids) + 1
    text_end = dataclasses.replace(f.syntax, think_end=Marker("</thought>", None, ("</thought>",)))
    m = matcher(f, tool_grammar(prompt(), tools, text_end, True, "m"))
    for text, whole in (("a </though> b</thought>\n\n" + call, True), (call, True), ("a</thought>b</thought>" + call,
                                                                                      False)):
        ids = enc(text) + [f.eos]
        assert (m.deep_copy().validate_tokens(ids) == len(ids)) is whole, text


def test_none_keeps_out_only_the_whole_marker(fixtures):
    f = fixtures["qwen_split"]
    none = prompt(ToolChoiceMode.NONE)
    assert banned_tokens(none, f.syntax) == {}
    m = matcher(f, none_grammar(none, f.syntax))
    tok, vocab = f.tokenizer, f.tokenizer.get_vocab()
    enc = lambda text: tok.encode(text, add_special_tokens=False)
    assert m.deep_copy().validate_tokens([f.eos]) == 1  # an empty answer may end at once
    for text in ("Hello <tool", "a <tool_ca", "x<tool_call", "<tool <tool_", "</tool_call> is fine"):
        ids = enc(text) + [vocab["</think>"]] + enc("more") + [f.eos]
        assert m.deep_copy().validate_tokens(ids) == len(ids), text
    for ids in (enc("Hi <tool_call>"), [vocab["<tool"], vocab["_call>"]], enc("<") + enc("tool_call>")):
        assert m.deep_copy().validate_tokens(ids) == len(ids) - 1, tok.decode(ids)
    for family in ("qwen", "qwen3_coder", "gemma4"):  # one-token markers: banned by logit bias, no grammar
        s = fixtures[family].syntax
        assert none_grammar(none, s) is None and banned_tokens(none, s) == {s.call_start.token: -1e9}


def test_names_a_syntax_cannot_write(fixtures):
    f = fixtures["gemma4"]
    tools = (Tool("maps.route", "Route", ""), Tool("ping", "Ping", ""))
    p = prompt(tools=tools)
    grammar = tool_grammar(p, tool_set(p, f.syntax, "m"), f.syntax, False, "m")
    assert "ping" in grammar and "maps.route" not in grammar
    p = prompt(ToolChoiceMode.FUNCTION, "maps.route", tools=tools)
    with pytest.raises(InvalidRequest) as info:
        tool_grammar(p, tool_set(p, f.syntax, "m"), f.syntax, False, "m")
    assert info.value.field == "chat.tool_choice.function_name"


NODE = {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {
    "type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v", "kids"],
        "additionalProperties": False}
RICH = {"type": "object", "$defs": {"node": NODE}, "properties": {
    "tree": {"$ref": "#/$defs/node"}, "maybe": {"type": ["string", "null"], "maxLength": 3},
    "ratio": {"type": "number", "minimum": 0, "maximum": 1}, "on": {"type": "boolean"},
    "my-key": {"type": "string", "enum": ["x", "y z"]}, "odd, key:x": {"type": "integer"},
    "note": {"type": "string", "minLength": 2, "maxLength": 6},
    "pairs": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
              "minItems": 1, "maxItems": 2},
    "mode": {"anyOf": [{"type": "integer"}, {"const": "auto"}]}}}


@pytest.mark.parametrize("family", ("qwen3_coder", "gemma4", "gemma4_plain"))
def test_schemas_beyond_flat_objects(fixtures, family):
    """Nested, recursive ($ref), union and keyword-bound values; qwen3_coder's parser
    reads an untyped value back as text unless it is a JSON object or array, and its
    keys hold no spaces, so ``mode`` (a number or "auto") and ``odd, key:x`` are left
    out there."""
    f = fixtures[family]
    keys = [k for k in RICH["properties"] if family != "qwen3_coder" or k not in ("mode", "odd, key:x")]
    tools = (Tool("rich", "Rich", json.dumps({**RICH, "required": keys})),)
    p = prompt(ToolChoiceMode.FUNCTION, "rich", parallel=False, tools=tools)
    toolset = tool_set(p, f.syntax, family)
    m, rng = matcher(f, tool_grammar(p, toolset, f.syntax, False, family)), random.Random(3)
    for _ in range(12):
        text = f.tokenizer.decode(walk(m.deep_copy(), f, rng))
        calls, rest = split(f, text, toolset)
        assert len(calls) == 1 and rest == "", text
        assert toolset.valid("rich", json.loads(calls[0].arguments)), text
