"""A gateway's structural tag (xgrammar's format) as a Lark grammar for our grammar engine.

Invariant: a construct that would let free text run between tags (``any_text``, triggered tags
that need not occur) is refused by name, never loosened; JSON inside keeps our fixed separators.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from engine.errors import InvalidRequest
from engine.validation import Limits, parse_json

FIELD = "sampling_params.structural_tag"
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
SUPPORTED = "const_string, json_schema, regex, sequence, or, tag, tags_with_separator, triggered_tags"


def structural_tag_grammar(text: str, schema_policy: Callable[[dict], dict] = lambda schema: schema,
                           max_bytes: int = Limits.max_json_bytes) -> str:
    """The Lark grammar that admits exactly the output ``text`` (a structural tag) allows; each
    JSON schema inside passes through ``schema_policy`` first. ``text`` over ``max_bytes``, or
    nested deeper than ``MAX_JSON_DEPTH``, is refused before it is walked."""
    tag = parse_json(FIELD, text, max_bytes)
    if not isinstance(tag, dict):
        raise InvalidRequest(FIELD, "must be a JSON object")
    if "structures" in tag:  # the older form: tags that follow triggers, at least one
        tag = {"format": {"type": "triggered_tags", "at_least_one": True, "tags": [
            {"begin": s.get("begin", ""), "content": {"type": "json_schema", "json_schema": s.get("schema", {})},
             "end": s.get("end", "")} for s in tag["structures"] if isinstance(s, dict)]}}
    if not isinstance(tag.get("format"), dict):
        raise InvalidRequest(FIELD, "needs a 'format' (or 'structures')")
    lark = _Lark(schema_policy)
    start = lark.node(tag["format"])
    return "\n".join([f"start: {start}", *lark.rules])


class _Lark:
    def __init__(self, schema_policy: Callable[[dict], dict]):
        self.schema_policy = schema_policy
        self.rules: list[str] = []

    def node(self, node: Any) -> str:
        if not isinstance(node, dict):
            raise InvalidRequest(FIELD, f"holds {json.dumps(node)[:80]} where a format object belongs")
        kind = node.get("type", "tag" if "begin" in node else None)
        if kind == "const_string":
            return _literal(node.get("value", ""))
        if kind == "json_schema":
            schema = node.get("json_schema", {})
            schema = self.schema_policy(schema) if isinstance(schema, dict) else ({} if schema is True else
                                                                                    {"not": {}})
            return self.rule("%json " + json.dumps({**schema, "x-guidance": JSON_OPTIONS}))
        if kind == "regex":
            return self.rule("/" + str(node.get("pattern", "")).replace("/", "\\/") + "/")
        if kind == "sequence":
            return self.rule(" ".join(self.node(e) for e in _listed(node, "elements")))
        if kind == "or":
            return self.rule(" | ".join(self.node(e) for e in _listed(node, "elements")))
        if kind == "tag":
            parts = [_literal(node.get("begin", "")), self.node(node.get("content", {"type": "const_string"})),
                     _literal(node.get("end", ""))]
            return self.rule(" ".join(p for p in parts if p != '""') or '""')
        if kind == "tags_with_separator":
            return self.separated(node)
        if kind == "triggered_tags":
            return self.triggered(node)
        raise InvalidRequest(FIELD, f"format type {kind!r} is not supported ({SUPPORTED} are)")

    def triggered(self, node: dict) -> str:
        if not node.get("at_least_one"):
            raise InvalidRequest(FIELD, "triggered_tags without at_least_one lets free text run between tags; "
                                        "only a required call (at_least_one) is supported")
        tag = self.rule(" | ".join(self.node(t) for t in _listed(node, "tags")))
        return tag if node.get("stop_after_first") else self.rule(f"{tag}+")

    def separated(self, node: dict) -> str:
        tag = self.rule(" | ".join(self.node(t) for t in _listed(node, "tags")))
        if node.get("stop_after_first"):
            return tag if node.get("at_least_one") else self.rule(f"{tag}?")
        many = self.rule(f"{tag} ({_literal(node.get('separator', ''))} {tag})*")
        return many if node.get("at_least_one") else self.rule(f"{many}?")

    def rule(self, body: str) -> str:
        name = f"r{len(self.rules)}"
        self.rules.append(f"{name}: {body}")
        return name


def _listed(node: dict, key: str) -> list:
    items = node.get(key)
    if not isinstance(items, list) or not items:
        raise InvalidRequest(FIELD, f"{node.get('type')} needs a non-empty list of {key}")
    return items


def _literal(text: str) -> str:
    return json.dumps(str(text), ensure_ascii=False)
