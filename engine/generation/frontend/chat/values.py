"""Tool arguments as Lark rules for the call syntaxes that are not JSON: raw text values
(qwen3_coder's strings) and gemma4's ``{key:value}`` values, each following its JSON
Schema as far as the syntax can carry it; what it cannot carry is left to the check
after the fact. A raw text never contains the texts the parsers end it at."""

from __future__ import annotations

import json
import re

from ...grammar.formats import JSON_OPTIONS
from .syntax import Marker

_META = set("\\.+*?()|[]{}^$#&-~/")  # escaped in a Lark regex (never < or >: word boundaries there)
_SCALAR = ("integer", "number", "boolean", "null")
_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


class Unwritable(Exception):
    """A tool the syntax cannot write (its name or a key); the message says why."""


def regex_escape(text: str) -> str:
    return "".join("\\" + c if c in _META else {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c, c) for c in text)


def excluding(texts) -> str:
    """A terminal operand: any text with none of ``texts`` in it."""
    return "~/(?s:.*(?:" + "|".join(regex_escape(t) for t in texts) + ").*)/"


class Rules:
    """Lark rules and terminals of one tool, named under ``prefix``."""

    def __init__(self, prefix: str, root: dict):
        self.prefix, self.root = prefix, root
        self.lines: list[str] = []
        self.refs: dict[str, str] = {}  # a $ref's rule, once named (recursive schemas recurse in the grammar)
        self._count = 0

    def name(self, terminal: bool = False) -> str:
        self._count += 1
        name = f"{self.prefix}{self._count}"
        return name.upper() if terminal else name.lower()

    def define(self, name: str, body: str) -> str:
        self.lines.append(f"{name}: {body}")
        return name

    def add(self, body: str, terminal: bool = False) -> str:
        return self.define(self.name(terminal), body)

    def json(self, schema: dict) -> str:
        """A rule writing JSON for ``schema`` (with the root's definitions for its $refs)."""
        text = json.dumps(schema)
        defs = {k: self.root[k] for k in ("$defs", "definitions") if k in self.root and k not in schema
                and '"$ref"' in text}
        return self.add("%json " + json.dumps({**schema, **defs, "x-guidance": JSON_OPTIONS}))

    def text(self, schema: dict, avoid: tuple[str, ...], non_empty: bool = False, not_null: bool = False) -> str:
        """A terminal for a string's raw text: its length and pattern, none of ``avoid``."""
        low = max(int(schema.get("minLength", 0)), 1 if non_empty else 0)
        high = schema.get("maxLength")
        parts = [f"/(?s:.{{{low},{int(high) if high is not None else ''}}})/"]
        if isinstance(schema.get("pattern"), str):
            parts.append(f"/{_pattern(schema['pattern'])}/")
        if avoid:
            parts.append(excluding(avoid))
        if not_null:
            parts.append("~/(?i:null)/")
        return self.add(" & ".join(parts), terminal=True)

    def resolve(self, ref: str) -> dict:
        """A local $ref's target ({} for any other)."""
        if ref != "#" and not ref.startswith("#/"):
            return {}
        target: object = self.root
        for key in ref[2:].split("/") if ref.startswith("#/") else ():
            target = target.get(key.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
        return target if isinstance(target, dict) else {}

def required_keys(schema: dict) -> list[tuple[str, dict]]:
    """The required keys in the schema's order, with their schemas ({}: any)."""
    found = schema.get("properties")
    props: dict = found if isinstance(found, dict) else {}
    required = [k for k in schema.get("required", ()) if isinstance(k, str)]
    keys = [k for k in props if k in required] + [k for k in required if k not in props]
    out: list[tuple[str, dict]] = []
    for k in keys:
        prop = props.get(k)
        out.append((k, prop if isinstance(prop, dict) else {}))
    return out


def raw_choices(values, avoid: tuple[str, ...], not_null: bool) -> str:
    """Alternatives of the string values that a raw text can hold."""
    ok = [v for v in values if isinstance(v, str) and v and not any(a in v for a in avoid)
          and not (not_null and v.lower() == "null")]
    if not ok:
        raise Unwritable("no value of its enum can be written")
    return " | ".join(json.dumps(v) for v in ok)


class Gemma4Values:
    """gemma4's values: strings between its quote, JSON scalars, {key:value} objects
    with bare keys (JSON-quoted where a key is not a word) and [a,b] arrays."""

    def __init__(self, rules: Rules, quote: Marker, avoid: tuple[str, ...]):
        self.rules, self.quote = rules, quote
        self.avoid = (*avoid, quote.text)  # a string ends at the quote
        self._any = ""

    def value(self, schema) -> str:
        if not isinstance(schema, dict) or not schema:
            return self.any()
        if "const" in schema:
            return self._either([self.literal(schema["const"])] if self._writable(schema["const"]) else [])
        if isinstance(schema.get("enum"), list):
            return self._either([self.literal(v) for v in schema["enum"] if self._writable(v)])
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                return self._either([self.value(s) for s in schema[key]])
        if isinstance(schema.get("$ref"), str):
            return self._ref(schema)
        kind = schema.get("type")
        if isinstance(kind, list):
            return self._either([self.value({**schema, "type": k}) for k in kind])
        if kind == "string":
            return self.string(schema)
        if kind in _SCALAR:
            return self.rules.json({"type": kind, **{k: schema[k] for k in _KEYWORDS if k in schema}})
        if kind == "object":
            return self.object(schema)
        if kind == "array":
            return self.array(schema)
        return self.any()

    def object(self, schema: dict) -> str:
        items = [f"{self.key(k)} {self.value(prop)}" for k, prop in required_keys(schema)]
        return '"{" ' + ' "," '.join(items) + ' "}"' if items else '"{}"'

    def array(self, schema: dict) -> str:
        item = self.value(schema.get("items", {}))
        low, high = int(schema.get("minItems", 0)), schema.get("maxItems")
        if high is not None and int(high) <= 0:
            return '"[]"'
        more = f'("," {item})' + (f"{{{max(low - 1, 0)},{int(high) - 1}}}" if high is not None else
                                  f"{{{low - 1},}}" if low > 1 else "*")
        return f'"[" {item} {more} "]"' if low > 0 else f'"[" ({item} {more})? "]"'

    def string(self, schema: dict) -> str:
        quote = self.quote
        if quote.plain:  # one lexeme from quote to quote: the first quote after the text ends it
            body = self.rules.text(schema, self.avoid)
            return self.rules.add(f"{json.dumps(quote.text)} {body} {json.dumps(quote.text)}", terminal=True)
        body = self.rules.text(schema, self.avoid, non_empty=True)
        return f"{quote.lark} {body}{'' if int(schema.get('minLength', 0)) else '?'} {quote.lark}"

    def key(self, key: str) -> str:
        """``key:``, bare where it is a word, else quoted like a string (the parser reads
        both; JSON quotes would not keep its commas and colons from the bare-key pass)."""
        if re.fullmatch(r"\w+", key):
            return json.dumps(key + ":")
        if not self._writable(key):
            raise Unwritable(f"the key {key!r} cannot be written in this syntax")
        return f'{self.literal(key)} ":"'

    def literal(self, value) -> str:
        if isinstance(value, str):
            return json.dumps(self.quote.text + value + self.quote.text) if self.quote.plain else \
                f"{self.quote.lark} {json.dumps(value) if value else ''} {self.quote.lark}"
        if isinstance(value, list):
            return '"[" ' + ' "," '.join(self.literal(v) for v in value) + ' "]"' if value else '"[]"'
        if isinstance(value, dict):
            items = [f"{self.key(k)} {self.literal(v)}" for k, v in value.items()]
            return '"{" ' + ' "," '.join(items) + ' "}"' if items else '"{}"'
        return json.dumps(json.dumps(value))

    def any(self) -> str:
        """Any value, keys as words (a schema that says nothing more)."""
        if not self._any:
            self._any = name = self.rules.name()
            entry = f'/[A-Za-z_][A-Za-z0-9_]*/ ":" {name}'
            self.rules.define(name, f'{self.string({})} | /-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?/ | '
                                    f'"true" | "false" | "null" | "{{" ({entry} ("," {entry})*)? "}}" | '
                                    f'"[" ({name} ("," {name})*)? "]"')
        return self._any

    def _ref(self, schema: dict) -> str:
        ref = schema["$ref"]
        if ref not in self.rules.refs:
            self.rules.refs[ref] = name = self.rules.name()
            self.rules.define(name, self.value(self.rules.resolve(ref)))
        return self.rules.refs[ref]

    def _writable(self, value) -> bool:
        return not any(a in t for t in _strings(value) for a in self.avoid)

    @staticmethod
    def _either(options: list[str]) -> str:
        if not options:
            raise Unwritable("no value of its schema can be written")
        return "(" + " | ".join(options) + ")"


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, dict)):
        for item in (value if isinstance(value, list) else [*value, *value.values()]):
            yield from _strings(item)


def _pattern(pattern: str) -> str:
    """A JSON Schema pattern (found anywhere in the text) as a whole-text regex."""
    body = re.sub(r"(?<!\\)/", r"\\/", pattern)
    start, end = body.startswith("^"), body.endswith("$") and not body.endswith("\\$")
    core = body[1 if start else 0:len(body) - 1 if end else len(body)]
    return f"{'' if start else '(?s:.*)'}(?:{core}){'' if end else '(?s:.*)'}"
