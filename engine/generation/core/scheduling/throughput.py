"""How fast a replica generates now: tokens over a sliding window (GetLoad's rate)."""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

WINDOW_S = 10.0


class TokenRate:
    """Tokens per second over a sliding window: how fast this replica generates now."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic):
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self._clock = clock
        self._steps: deque[tuple[float, int]] = deque()  # (time, tokens), oldest first
        self._in_window = 0

    def add(self, tokens: int) -> None:
        if tokens > 0:
            self._steps.append((self._clock(), tokens))
            self._in_window += tokens
        self._forget()

    def per_second(self) -> float:
        self._forget()
        return self._in_window / self.window_s

    def _forget(self) -> None:
        oldest = self._clock() - self.window_s
        while self._steps and self._steps[0][0] <= oldest:
            self._in_window -= self._steps.popleft()[1]
