"""A chat's output split three ways as it streams: the answer, the reasoning between the
thinking markers, and tool calls between the call markers. Text that may begin a marker
is held back until it is known; a call that does not parse or validate is answer text."""

from __future__ import annotations

import enum
import json
import re
import uuid
from dataclasses import dataclass, field

from ....events import ToolCallDelta
from ....requests import ToolCall
from .syntax import ChatSyntax, Marker
from .tools import ToolSet

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
_CLOSING = " \t\r\n}"  # what may still close a streamed call's object


class _State(enum.Enum):
    ANSWER = "answer"
    REASONING = "reasoning"
    CALL = "call"


@dataclass
class Split:
    text: str = ""
    reasoning: str = ""
    deltas: list[ToolCallDelta] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.text or self.reasoning or self.deltas or self.calls)


class OutputSplitter:
    def __init__(self, syntax: ChatSyntax, tools: ToolSet | None, *, in_reasoning: bool = False):
        self._syntax = syntax
        self._tools = tools
        self._state = _State.REASONING if in_reasoning and syntax.thinking else _State.ANSWER
        self._opening: dict[str, _State] = {syntax.think_markers()[0].text: _State.REASONING} if syntax.thinking else {}
        if tools is not None and syntax.tool_calling:
            self._opening[syntax.call_markers()[0].text] = _State.CALL
        self._pending = ""
        self._call = ""  # the open call's text between its markers
        self._call_id = ""
        self._streamed = -1  # characters of the open call's arguments sent; -1: not named yet
        self._strip = False  # whitespace after a closing marker is layout, not answer
        self.calls = 0  # calls completed

    def feed(self, text: str) -> Split:
        out = Split()
        self._pending += text
        while self._step(out, final=False):
            pass
        return out

    def finish(self) -> Split:
        """Everything held back; a call left open is parsed if its syntax has no end
        marker, else returned as text."""
        out = Split()
        while self._step(out, final=True):
            pass
        return out

    def _step(self, out: Split, final: bool) -> bool:
        if self._strip:
            stripped = self._pending.lstrip()
            if not stripped and not final:
                self._pending = ""
                return False
            self._pending, self._strip = stripped, False
        if self._state is _State.CALL:
            return self._in_call(out, final)
        markers = (self._opening if self._state is _State.ANSWER
                   else {self._syntax.think_markers()[1].text: _State.ANSWER})  # REASONING: it thinks
        p = self._pending
        found = min(((p.find(m), m) for m in markers if m in p), default=None)
        if found is None:
            keep = 0 if final else _held(p, markers)
            self._emit(out, p[: len(p) - keep])
            self._pending = p[len(p) - keep:]
            return False
        at, marker = found
        self._emit(out, p[:at])
        self._pending = p[at + len(marker):]
        self._state, self._strip = markers[marker], markers[marker] is _State.ANSWER
        if self._state is _State.CALL:
            self._call, self._call_id, self._streamed = "", _new_id(), -1
        return True

    def _emit(self, out: Split, text: str) -> None:
        if self._state is _State.REASONING:
            out.reasoning += text
        else:
            out.text += text

    def _in_call(self, out: Split, final: bool) -> bool:
        start, end_marker, _ = self._in_call_syntax()
        end = end_marker.text
        text = self._call + self._pending
        at = text.find(end) if end else -1
        if at < 0:
            self._call, self._pending = text, ""
            if not final:
                self._stream(out, _held(text, (end,)) if end else 0)
                return False
            if end:  # cut short: the markup is returned as it was written
                self._state = _State.ANSWER
                out.text += start.text + self._call
                return False
        else:
            self._call, self._pending = text[:at], text[at + len(end):]
        self._close(out)
        self._state, self._strip = _State.ANSWER, True
        return True

    def _in_call_syntax(self) -> tuple[Marker, Marker, ToolSet]:
        """The call markers and the tools: a call opens only with both (``__init__``)."""
        assert self._tools is not None
        start, end = self._syntax.call_markers()
        return start, end, self._tools

    def _stream(self, out: Split, held: int) -> None:
        """JSON calls stream their name, then their arguments' text as it grows (less
        ``held`` characters that may begin the end marker)."""
        head = _HEAD.match(self._call) if self._syntax.json_calls else None
        if head is None:
            return
        if self._streamed < 0:
            out.deltas.append(ToolCallDelta(self.calls, self._call_id, json.loads(f'"{head.group(1)}"')))
            self._streamed = 0
        arguments = self._call[head.end():len(self._call) - held]
        ready = len(arguments.rstrip(_CLOSING))
        if ready > self._streamed:
            out.deltas.append(ToolCallDelta(self.calls, arguments=arguments[self._streamed:ready]))
            self._streamed = ready

    def _close(self, out: Split) -> None:
        start, end, tools = self._in_call_syntax()
        calls = _parsed(self._syntax, self._call, tools)
        if calls is None:
            out.text += start.text + self._call + end.text
            return
        streamed = self._streamed >= 0 and len(calls) == 1
        for name, arguments, model_id in calls:
            call_id = self._call_id if streamed else model_id or _new_id()
            text = json.dumps(arguments, ensure_ascii=False)
            if streamed:
                rest = _arguments_text(self._call)[self._streamed:]
                if rest:
                    out.deltas.append(ToolCallDelta(self.calls, arguments=rest))
            else:
                out.deltas.append(ToolCallDelta(self.calls, call_id, name, text))
            out.calls.append(ToolCall(call_id, name, text))
            self.calls += 1


def _parsed(syntax: ChatSyntax, text: str, tools: ToolSet) -> list[tuple[str, dict, str]] | None:
    """(name, arguments, id the model wrote) per call, or None unless every call parses,
    names a tool and has valid arguments."""
    parse = syntax.parse
    if parse is None:  # no tool calling: nothing is a call
        return None
    try:
        parsed = parse(text if not syntax.json_calls else text.strip(), tools.template_tools())
    except Exception:  # noqa: BLE001 - any parser failure means "not a call"
        return None
    items = parsed if isinstance(parsed, list) else [parsed]
    calls: list[tuple[str, dict, str]] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        name, arguments = item.get("name"), item.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(name, str) or not tools.valid(name, arguments):
            return None
        model_id = item.get("id")
        calls.append((name, arguments, model_id if isinstance(model_id, str) else ""))
    return calls or None


def _arguments_text(call: str) -> str:
    """A JSON call's arguments as the model wrote them (its object's closing brace off)."""
    head = _HEAD.match(call)
    body = call[head.end():].rstrip() if head else ""
    return body[:-1].rstrip() if body.endswith("}") else body


def _held(text: str, markers) -> int:
    """Length of the longest end of ``text`` that begins a marker."""
    for n in range(min(len(text), max(map(len, markers), default=0) - 1), 0, -1):
        tail = text[-n:]
        if any(m.startswith(tail) for m in markers):
            return n
    return 0


def _new_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]
