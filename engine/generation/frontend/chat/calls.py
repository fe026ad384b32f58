"""Each enforced syntax's tool calls as Lark rules: ``calls`` writes one call (several
where parallel calls are allowed) of the named tools in the model's own syntax, as its
mlx-lm parser reads it back, with arguments that follow each tool's schema."""

from __future__ import annotations

import json
import re

from ...grammar.formats import JSON_OPTIONS
from .syntax import ChatSyntax
from .tools import ToolSet
from .values import Gemma4Values, Rules, Unwritable, raw_choices, required_keys

# qwen3_coder's parser returns these types' values as the raw text (mlx_lm.tool_parsers.qwen3_coder)
_RAW_TYPES = {"string", "str", "text", "varchar", "char", "enum"}


def calls_rules(syntax: ChatSyntax, names: list[str], tools: ToolSet, parallel: bool) -> str:
    """The rules of ``calls``; Unwritable when the syntax can write none of ``names``."""
    bodies, lines, why = [], [], ""
    for i, name in enumerate(names):
        schema = tools.schemas[name]
        rules = Rules(f"t{i}_", schema)
        try:
            bodies.append(_BODIES[syntax.parser](rules, name, schema, syntax))
        except Unwritable as exc:
            why = why or f"{name!r}: {exc}"
            continue
        lines += rules.lines
    if not bodies:
        raise Unwritable(why)
    start_marker, end_marker = syntax.call_markers()
    start, end = start_marker.lark, end_marker.lark if end_marker.text else ""

    def more(separator: str) -> str:
        return f" ({json.dumps(separator)} call)*" if parallel else ""

    calls, call = {  # parallel calls as each syntax's template writes them
        "json_tools": ("call" + more("\n"), f'{start} "\\n" body "\\n" {end}'),
        "mistral": (f'{start} "[" call{more(", ")} "]"', "body"),
        "pythonic": (f'{start} "[" call{more(", ")} "]" {end}', "body"),
        "qwen3_coder": ("call" + more("\n"), f'{start} "\\n" body {end}'),
        "gemma4": ("call+" if parallel else "call", f"{start} body {end}"),
    }[syntax.parser]
    return "\n".join([f"calls: {calls}", f"call: {call}", "body: " + " | ".join(bodies), *lines]) + "\n"


def _closed(schema: dict) -> dict:
    """Arguments take only the keys the schema names, unless it says otherwise."""
    return schema if "additionalProperties" in schema else {**schema, "additionalProperties": False}


def _json_object(rules: Rules, name: str, schema: dict, syntax: ChatSyntax) -> str:
    """{"name": ..., "arguments": {...}} (json_tools, mistral)."""
    return rules.add("%json " + json.dumps({
        "type": "object", "properties": {"name": {"const": name}, "arguments": _closed(schema)},
        "required": ["name", "arguments"], "additionalProperties": False, "x-guidance": JSON_OPTIONS}))


def _pythonic(rules: Rules, name: str, schema: dict, syntax: ChatSyntax) -> str:
    """name(key=value, ...) with the required keyword arguments."""
    args = ' ", " '.join(f'"{key}=" {rules.json(prop)}' for key, prop in required_keys(schema))
    return f'{json.dumps(name + "(")} {args} ")"' if args else json.dumps(name + "()")


def _qwen3_coder(rules: Rules, name: str, schema: dict, syntax: ChatSyntax) -> str:
    """<function=NAME> then <parameter=KEY>, the value on lines of its own, </parameter>
    per required key: strings raw (never "null", which reads back as None), others JSON."""
    avoid = ("</parameter>", syntax.call_markers()[1].text)
    params = []
    for key, prop in required_keys(schema):
        if not re.fullmatch(r"[^\s<>]+", key):
            raise Unwritable(f"the parameter name {key!r} cannot be written in this syntax")
        head, tail = json.dumps(f"<parameter={key}>\n"), json.dumps("\n</parameter>\n")
        if _raw(prop):
            values = [prop["const"]] if "const" in prop else prop.get("enum")
            body = rules.add(raw_choices(values, avoid, True), terminal=True) if isinstance(values, list) \
                else rules.text(prop, avoid, not_null=True)
            params.append(rules.add(f"{head} {body} {tail}", terminal=True))  # one lexeme: the text ends at its tail
        else:
            params.append(f"{head} {rules.json(prop)} {tail}")
    return " ".join([json.dumps(f"<function={name}>\n"), *params, json.dumps("</function>\n")])


def _raw(schema: dict) -> bool:
    """The parser hands this value back as its text."""
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind.strip().lower() in _RAW_TYPES
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    return not schema or (kind is None and isinstance(values, list) and all(isinstance(v, str) for v in values))


def _gemma4(rules: Rules, name: str, schema: dict, syntax: ChatSyntax) -> str:
    """call:NAME{key:value,...}."""
    if not re.fullmatch(r"[\w-]+", name):
        raise Unwritable("the name cannot be written in this syntax")
    assert syntax.quote is not None  # chat_syntax sets it for gemma4
    values = Gemma4Values(rules, syntax.quote, (syntax.call_markers()[1].text,))
    return f'{json.dumps("call:" + name)} {values.object({**schema, "type": "object"})}'


_BODIES = {"json_tools": _json_object, "mistral": _json_object, "pythonic": _pythonic,
           "qwen3_coder": _qwen3_coder, "gemma4": _gemma4}
