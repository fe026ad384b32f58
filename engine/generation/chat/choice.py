"""Tool choice as constraints: REQUIRED and FUNCTION become an llguidance grammar of the
model's own call syntax whose arguments follow each tool's schema; NONE bans the call
marker's token; AUTO constrains nothing (calls are checked after the fact)."""

from __future__ import annotations

import json

from ...errors import Unsupported
from ...requests import ChatPrompt, ToolChoiceMode
from ..grammar.formats import JSON_OPTIONS
from .syntax import ChatSyntax, Marker
from .tools import ToolSet

ENFORCED_PARSERS = ("json_tools", "mistral", "pythonic")
BANNED = -1e9  # a logit bias no score overcomes


def enforceable(syntax: ChatSyntax) -> bool:
    """The grammar can write this model's calls: a known syntax with one-token markers."""
    end = syntax.call_end
    return (syntax.parser in ENFORCED_PARSERS and syntax.call_start.token is not None
            and (end is None or not end.text or end.token is not None))


def tool_grammar(prompt: ChatPrompt, tools: ToolSet, syntax: ChatSyntax, opens_reasoning: bool,
                 model: str) -> str | None:
    """The Lark grammar forcing a call (REQUIRED, FUNCTION), else None. A prompt that
    opened the model's reasoning may finish it first."""
    if prompt.tool_choice not in (ToolChoiceMode.REQUIRED, ToolChoiceMode.FUNCTION):
        return None
    if not enforceable(syntax):
        raise Unsupported(f"model {model!r} calls tools in a syntax ({syntax.parser or 'unknown'}) the grammar "
                          f"cannot enforce; tool_choice {prompt.tool_choice.value} needs one of "
                          f"{', '.join(ENFORCED_PARSERS)} with single-token markers")
    names = [prompt.function] if prompt.tool_choice is ToolChoiceMode.FUNCTION else [t.name for t in tools.tools]
    calls = _CALLS[syntax.parser](names, tools, syntax, prompt.parallel_tool_calls)
    think = syntax.think_end if opens_reasoning and syntax.thinking else None
    if think is not None and think.token is not None:
        return f'start: thought? calls\nthought: THOUGHT? {_token(think)} "\\n\\n"?\nTHOUGHT: /(?s:.+)/\n{calls}'
    return "start: calls\n" + calls


def banned_tokens(prompt: ChatPrompt, syntax: ChatSyntax) -> dict[int, float]:
    """NONE: the call marker's token may not be sampled."""
    if prompt.tool_choice is ToolChoiceMode.NONE and syntax.tool_calling and syntax.call_start.token is not None:
        return {syntax.call_start.token: BANNED}
    return {}


def _token(marker: Marker) -> str:
    return f"<[{marker.token}]>"


def _closed(schema: dict) -> dict:
    """Arguments take only the keys the schema names, unless it says otherwise."""
    return schema if "additionalProperties" in schema else {**schema, "additionalProperties": False}


def _object(name: str, tools: ToolSet) -> str:
    schema = {"type": "object", "properties": {"name": {"const": name}, "arguments": _closed(tools.schemas[name])},
              "required": ["name", "arguments"], "additionalProperties": False, "x-guidance": JSON_OPTIONS}
    return "%json " + json.dumps(schema)


def _repeat(rule: str, separator: str, parallel: bool) -> str:
    return f'{rule} ({json.dumps(separator)} {rule})*' if parallel else rule


def _json_tools(names, tools, syntax, parallel) -> str:
    bodies = "\n".join(f"body{i}: {_object(n, tools)}" for i, n in enumerate(names))
    either = " | ".join(f"body{i}" for i in range(len(names)))
    return (f"calls: {_repeat('call', chr(10), parallel)}\n"
            f'call: {_token(syntax.call_start)} "\\n" ({either}) "\\n" {_token(syntax.call_end)}\n{bodies}\n')


def _mistral(names, tools, syntax, parallel) -> str:
    bodies = "\n".join(f"body{i}: {_object(n, tools)}" for i, n in enumerate(names))
    either = " | ".join(f"body{i}" for i in range(len(names)))
    return (f'calls: {_token(syntax.call_start)} "[" {_repeat("call", ", ", parallel)} "]"\n'
            f"call: {either}\n{bodies}\n")


def _pythonic(names, tools, syntax, parallel) -> str:
    """name(key=value, ...) with the required keyword arguments in schema order."""
    rules = []
    for i, name in enumerate(names):
        schema = tools.schemas[name]
        props = schema.get("properties", {})
        keys = [key for key in props if key in set(schema.get("required", ()))]
        args = ' ", " '.join(f'"{key}=" arg{i}_{j}' for j, key in enumerate(keys))
        rules.append(f'fn{i}: {json.dumps(name + "(")} {args} ")"' if keys else f"fn{i}: {json.dumps(name + '()')}")
        rules.extend(f"arg{i}_{j}: %json " + json.dumps({**props[key], "x-guidance": JSON_OPTIONS})
                     for j, key in enumerate(keys))
    either = " | ".join(f"fn{i}" for i in range(len(names)))
    return (f'calls: {_token(syntax.call_start)} "[" {_repeat("call", ", ", parallel)} "]" '
            f"{_token(syntax.call_end)}\ncall: {either}\n" + "\n".join(rules) + "\n")


_CALLS = {"json_tools": _json_tools, "mistral": _mistral, "pythonic": _pythonic}
