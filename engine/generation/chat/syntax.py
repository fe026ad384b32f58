"""A model's tool-call and thinking markers, read once from its tokenizer (mlx-lm infers
the parser from the chat template or the vocabulary)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...description import ChatFacts


@dataclass(frozen=True)
class Marker:
    text: str
    token: int | None  # the one token that spells ``text``, if there is one


@dataclass(frozen=True)
class ChatSyntax:
    parser: str = ""  # mlx-lm's tool parser ("json_tools", "mistral", ...); "" without tool calling
    parse: Callable[[str, Any], Any] | None = None
    call_start: Marker | None = None
    call_end: Marker | None = None  # text "" where a call runs to the end of the output
    think_start: Marker | None = None
    think_end: Marker | None = None

    @property
    def tool_calling(self) -> bool:
        return self.parse is not None and self.call_start is not None

    @property
    def thinking(self) -> bool:
        return self.think_start is not None and self.think_end is not None

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
    marker = lambda text: Marker(text, _single_token(tokenizer, text)) if text is not None else None
    parse = getattr(tokenizer, "tool_parser", None)
    start = getattr(tokenizer, "tool_call_start", None) if parse is not None else None
    think = getattr(tokenizer, "has_thinking", False)
    return ChatSyntax(
        parser=parse.__module__.rsplit(".", 1)[-1] if start is not None else "",
        parse=parse if start is not None else None,
        call_start=marker(start) if start else None,
        call_end=marker(getattr(tokenizer, "tool_call_end", "") or "") if start else None,
        think_start=marker(tokenizer.think_start) if think else None,
        think_end=marker(tokenizer.think_end) if think else None)


def _single_token(tokenizer, text: str) -> int | None:
    if not text:
        return None
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


def _text(marker: Marker | None) -> str:
    return marker.text if marker is not None else ""
