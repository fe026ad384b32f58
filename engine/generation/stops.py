"""Stop-string matching across token boundaries.

Text that may be the start of a stop string is held back until it is known not to
be one; a matched stop ends generation and its text is never emitted.
"""

from __future__ import annotations

from typing import Sequence


class StopStrings:
    def __init__(self, stops: Sequence[str]):
        self._stops = sorted({s for s in stops if s}, key=len)
        self._pending = ""

    def feed(self, text: str) -> tuple[str, str | None]:
        """Adds text; returns (text safe to emit, matched stop string or None)."""
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
        """Returns held-back text when generation ends without a match."""
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
