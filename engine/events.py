"""Events a generation stream yields, in order: one Started, PromptLogprobs when asked, then
Deltas and one Finished per choice (the choices' events interleave)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .requests import ToolCall


class FinishReason(enum.Enum):
    LENGTH = "length"
    STOP = "stop"
    EOS = "eos"
    CANCELLED = "cancelled"
    ERROR = "error"
    TOOL_CALLS = "tool_calls"  # the answer ended with tool calls


@dataclass(frozen=True)
class TopLogprob:
    token_id: int
    logprob: float
    text: str


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class Started:
    request_id: str
    model: str
    prompt_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of call ``index``: id and name in its first piece, then pieces of the
    arguments' text."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True)
class Delta:
    """New tokens; ``text`` is the answer, ``reasoning`` the thinking, ``tool_calls``
    the calls these tokens completed (chat prompts split the output; others are all text)."""

    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()
    reasoning: str = ""
    tool_call_deltas: tuple[ToolCallDelta, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    choice: int = 0  # which of the request's n choices


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    draft_tokens: int = 0  # drafts verified by speculative decoding
    accepted_draft_tokens: int = 0  # of those, the ones the output kept
    accepted_prediction_tokens: int = 0  # drafts from the request's prediction the output kept
    rejected_prediction_tokens: int = 0  # and those it did not


@dataclass(frozen=True)
class Timings:
    queue_s: float
    time_to_first_token_s: float
    decode_tokens_per_s: float
    total_s: float


@dataclass(frozen=True)
class Finished:
    reason: FinishReason
    usage: Usage
    timings: Timings
    stop_sequence: str = ""
    stop_token_id: int | None = None
    error: str = field(default="", compare=False)
    choice: int = 0  # which of the request's n choices


@dataclass(frozen=True)
class PromptLogprobs:
    """Prompt tokens 1 to n-1, each with its log probability and alternatives; sent once, after Started."""

    tokens: tuple[TokenLogprob, ...]
    first_token_id: int | None = None  # prompt token 0, which has none (for contracts that list every token)


Event = Started | PromptLogprobs | Delta | Finished
