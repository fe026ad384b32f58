"""When a sequence stops: token rules, and stop strings in the text (held back while
they may match; a matched stop string is never emitted)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence


class TokenStop(enum.Enum):
    CONTINUE = "continue"
    EOS = "eos"  # not emitted, the sequence ends
    STOP_ID = "stop_id"  # not emitted, the sequence ends


@dataclass(frozen=True)
class TokenStopRule:
    """Stop ids and EOS count only past ``min_tokens``; the ``max_tokens``-th is the last."""

    max_tokens: int
    min_tokens: int
    eos_ids: frozenset[int]
    stop_token_ids: frozenset[int]
    ignore_eos: bool

    def check(self, token: int, count: int) -> TokenStop:
        """``token`` as the ``count``-th output token (1-based)."""
        if count <= self.min_tokens:
            return TokenStop.CONTINUE
        if not self.ignore_eos and token in self.eos_ids:
            return TokenStop.EOS
        if token in self.stop_token_ids:
            return TokenStop.STOP_ID
        return TokenStop.CONTINUE

    def active(self, count: int) -> bool:
        return count > self.min_tokens

    def is_last(self, count: int) -> bool:
        return count >= self.max_tokens


class StopStringMatcher:
    """Stop strings matched across token boundaries, with hold-back."""

    def __init__(self, stops: Sequence[str]):
        self._stops = sorted({s for s in stops if s}, key=len)
        self._pending = ""

    def feed(self, text: str) -> tuple[str, str | None]:
        """(text safe to emit, matched stop string or None)."""
        if not self._stops:
            return text, None
        buffer = self._pending + text
        match = _earliest(buffer, self._stops)
        if match is not None:
            at, stop = match
            self._pending = ""
            return buffer[:at], stop
        hold = _held_suffix(buffer, self._stops)
        self._pending = buffer[len(buffer) - hold :] if hold else ""
        return buffer[: len(buffer) - hold], None

    def flush(self) -> str:
        """The held-back text, at an end without a match."""
        text, self._pending = self._pending, ""
        return text


def _earliest(buffer: str, stops: Sequence[str]) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for stop in stops:
        at = buffer.find(stop)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, stop)
    return best


def _held_suffix(buffer: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of ``buffer`` that is a proper prefix of a stop."""
    hold = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(buffer)), hold, -1):
            if buffer.endswith(stop[:k]):
                hold = k
                break
    return hold
