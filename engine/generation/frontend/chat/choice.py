"""Tool choice as constraints: REQUIRED and FUNCTION become an llguidance grammar of the
model's own call syntax whose arguments follow each tool's schema (calls.py); NONE bans
the call marker's token, or, where the marker is several ordinary tokens, constrains
the output to text without it; AUTO constrains nothing (calls are checked after the
fact). A marker of one token is that token in a grammar, else its text (special tokens
by id)."""

from __future__ import annotations

import json

from ....errors import InvalidRequest, Unsupported
from ....requests import ChatPrompt, ToolChoiceMode
from .calls import calls_rules
from .syntax import ChatSyntax, Marker
from .tools import ToolSet
from .values import Unwritable, excluding

ENFORCED_PARSERS = ("json_tools", "mistral", "pythonic", "qwen3_coder", "gemma4")
BANNED = -1e9  # a logit bias no score overcomes


def enforceable(syntax: ChatSyntax) -> bool:
    """The grammar can write this model's calls (whatever its markers' tokenization)."""
    ends = syntax.parser == "mistral" or bool(syntax.call_end is not None and syntax.call_end.text)
    return syntax.parser in ENFORCED_PARSERS and syntax.call_start is not None and ends


def tool_grammar(prompt: ChatPrompt, tools: ToolSet, syntax: ChatSyntax, opens_reasoning: bool,
                 model: str) -> str | None:
    """The Lark grammar forcing a call (REQUIRED, FUNCTION), else None. A prompt that
    opened the model's reasoning may finish it first."""
    if prompt.tool_choice not in (ToolChoiceMode.REQUIRED, ToolChoiceMode.FUNCTION):
        return None
    if not enforceable(syntax):
        raise Unsupported(f"model {model!r} calls tools in a syntax ({syntax.parser or 'unknown'}) the grammar "
                          f"cannot enforce; tool_choice {prompt.tool_choice.value} needs one of "
                          f"{', '.join(ENFORCED_PARSERS)}")
    function = prompt.tool_choice is ToolChoiceMode.FUNCTION
    names = [prompt.function] if function else [t.name for t in tools.tools]
    try:
        calls = calls_rules(syntax, names, tools, prompt.parallel_tool_calls)
    except Unwritable as exc:
        raise InvalidRequest("chat.tool_choice.function_name" if function else "chat.tools",
                             f"no tool can be called in this model's {syntax.parser} syntax ({exc})") from None
    think = syntax.think_end if opens_reasoning and syntax.thinking else None
    if think is not None:
        return "start: thought? calls\n" + _thought(think, syntax.call_markers()[0]) + calls
    return "start: calls\n" + calls


def none_grammar(prompt: ChatPrompt, syntax: ChatSyntax) -> str | None:
    """NONE where the call marker is several ordinary tokens: any text without it (the
    thinking markers' special tokens still allowed), else None."""
    if not (prompt.tool_choice is ToolChoiceMode.NONE and needs_none_grammar(syntax)):
        return None
    marks = sorted({i for m in (syntax.think_start, syntax.think_end) if m is not None for i in m.special_ids})
    text = f"TEXT: /(?s:.+)/ & {excluding((syntax.call_markers()[0].text,))}\n"
    if not marks:
        return "start: TEXT?\n" + text
    return "start: TEXT? (mark TEXT?)*\nmark: " + " | ".join(f"<[{i}]>" for i in marks) + "\n" + text


def needs_none_grammar(syntax: ChatSyntax) -> bool:
    """NONE is a grammar on this model (no token of its call marker can be banned)."""
    return syntax.tool_calling and syntax.call_markers()[0].plain


def banned_tokens(prompt: ChatPrompt, syntax: ChatSyntax) -> dict[int, float]:
    """NONE: the call marker's token (or its first special token) may not be sampled."""
    if prompt.tool_choice is not ToolChoiceMode.NONE or not syntax.tool_calling:
        return {}
    start = syntax.call_markers()[0]
    token = start.token if start.token is not None else next(iter(start.special_ids), None)
    return {token: BANNED} if token is not None else {}


def _thought(think: Marker, call: Marker) -> str:
    """A finished thought: text, then the end marker. Its text holds neither the end
    marker's text nor the call marker's (so a call is never read as thought)."""
    head = think.parts[0] if think.token is None and think.parts else None
    avoid = [p for p in call.parts[:1] if call.token is None and isinstance(p, str)]
    if not isinstance(head, str):  # one token or a special token first: the thought's text stops at it
        text = f"/(?s:.+)/{' & ' + excluding(avoid) if avoid else ''}"
        return f'thought: THOUGHT? {think.lark} "\\n\\n"?\nTHOUGHT: {text}\n'
    rest = " ".join(json.dumps(p) if isinstance(p, str) else f"<[{p}]>" for p in think.parts[1:])
    return (f'thought: THOUGHT {rest} "\\n\\n"?\nTHOUGHT: THOUGHT_TEXT {json.dumps(head)}\n'
            f"THOUGHT_TEXT: /(?s:.*)/ & {excluding([head, *avoid])}\n")
