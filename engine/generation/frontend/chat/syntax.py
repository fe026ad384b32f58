"""A model's tool-call and thinking markers, read once from its tokenizer (mlx-lm infers
the parser from the chat template or the vocabulary)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from ....description import ChatFacts

GEMMA4_QUOTE = '<|"|>'  # gemma4's string delimiter


@dataclass(frozen=True)
class Marker:
    text: str
    token: int | None  # the one token that spells ``text``, if there is one
    parts: tuple[str | int, ...] = ()  # ``text`` as runs of ordinary text and special token ids

    @property
    def lark(self) -> str:
        """The marker in a Lark grammar: its one token, else its text (special tokens
        by id; ordinary text however the tokenizer splits it)."""
        if self.token is not None:
            return f"<[{self.token}]>"
        return " ".join(json.dumps(p) if isinstance(p, str) else f"<[{p}]>" for p in self.parts or (self.text,))

    @property
    def plain(self) -> bool:
        """Several ordinary tokens: only a grammar over its text can keep it out."""
        return self.token is None and all(isinstance(p, str) for p in self.parts or (self.text,))

    @property
    def special_ids(self) -> tuple[int, ...]:
        return tuple(p for p in self.parts if isinstance(p, int))


@dataclass(frozen=True)
class ChatSyntax:
    parser: str = ""  # mlx-lm's tool parser ("json_tools", "mistral", ...); "" without tool calling
    parse: Callable[[str, Any], Any] | None = None
    call_start: Marker | None = None
    call_end: Marker | None = None  # text "" where a call runs to the end of the output
    think_start: Marker | None = None
    think_end: Marker | None = None
    quote: Marker | None = None  # gemma4's string delimiter

    @property
    def tool_calling(self) -> bool:
        return self.parse is not None and self.call_start is not None

    @property
    def thinking(self) -> bool:
        return self.think_start is not None and self.think_end is not None

    def call_markers(self) -> tuple[Marker, Marker]:
        """(call_start, call_end): set together, where the model calls tools (``tool_calling``)."""
        if self.call_start is None or self.call_end is None:
            raise ValueError("this model's chat syntax has no tool calls")
        return self.call_start, self.call_end

    def think_markers(self) -> tuple[Marker, Marker]:
        """(think_start, think_end), where the model thinks (``thinking``)."""
        if self.think_start is None or self.think_end is None:
            raise ValueError("this model's chat syntax has no reasoning markers")
        return self.think_start, self.think_end

    @property
    def json_calls(self) -> bool:
        """Calls are one JSON object each: {"name": ..., "arguments": {...}} between the markers."""
        return self.parser == "json_tools"

    def facts(self, enforced: bool) -> ChatFacts:
        return ChatFacts(tool_calling=self.tool_calling, tool_parser=self.parser,
                         tool_call_start=_text(self.call_start), tool_call_end=_text(self.call_end),
                         tool_choice_enforced=enforced,
                         reasoning_start=_text(self.think_start), reasoning_end=_text(self.think_end))


def chat_syntax(tokenizer) -> ChatSyntax:
    """What ``tokenizer`` (mlx-lm's TokenizerWrapper) says; empty for plain tokenizers."""
    specials = _special_tokens(tokenizer)

    def marker(text: str | None) -> Marker | None:
        return Marker(text, _single_token(tokenizer, text), _parts(text, specials)) if text is not None else None

    parse = getattr(tokenizer, "tool_parser", None)
    start = getattr(tokenizer, "tool_call_start", None) if parse is not None else None
    think = getattr(tokenizer, "has_thinking", False)
    parser = parse.__module__.rsplit(".", 1)[-1] if start is not None else ""
    return ChatSyntax(
        parser=parser,
        parse=parse if start is not None else None,
        call_start=marker(start) if start else None,
        call_end=marker(getattr(tokenizer, "tool_call_end", "") or "") if start else None,
        think_start=marker(tokenizer.think_start) if think else None,
        think_end=marker(tokenizer.think_end) if think else None,
        quote=marker(GEMMA4_QUOTE) if parser == "gemma4" else None)


def _single_token(tokenizer, text: str) -> int | None:
    if not text:
        return None
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


def _special_tokens(tokenizer) -> dict[str, int]:
    """The added tokens marked special (the ones a grammar names by id, never as text)."""
    try:
        added = dict(getattr(tokenizer, "added_tokens_decoder", None) or {})
    except Exception:  # noqa: BLE001 - a tokenizer without added tokens has no special ones
        return {}
    return {t.content: i for i, t in added.items() if getattr(t, "special", False) and t.content}


def _parts(text: str, specials: dict[str, int]) -> tuple[str | int, ...]:
    found = [s for s in specials if s in text]
    if not found:
        return (text,) if text else ()
    pattern = re.compile("|".join(re.escape(s) for s in sorted(found, key=len, reverse=True)))
    parts: list[str | int] = []
    at = 0
    for match in pattern.finditer(text):
        if match.start() > at:
            parts.append(text[at:match.start()])
        parts.append(specials[match.group()])
        at = match.end()
    if at < len(text):
        parts.append(text[at:])
    return tuple(parts)


def _text(marker: Marker | None) -> str:
    return marker.text if marker is not None else ""
