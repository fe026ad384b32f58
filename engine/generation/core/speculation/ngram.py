"""Prompt lookup: propose what followed the latest earlier occurrence of the last n
tokens, longest n first; the index grows incrementally."""

from __future__ import annotations

from typing import Sequence


class NgramIndex:
    def __init__(self, min_n: int = 2, max_n: int = 4):
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.min_n, self.max_n = min_n, max_n
        self._ends: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_n + 1)]
        self._next_end = 1  # n-grams ending before this position are recorded

    def _index(self, tokens: Sequence[int]) -> None:
        """Up to the last token: the suffix is never matched against itself."""
        for end in range(self._next_end, len(tokens)):
            for n in range(self.min_n, min(self.max_n, end) + 1):
                self._ends[n][tuple(tokens[end - n : end])] = end
        self._next_end = max(self._next_end, len(tokens))

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        if k <= 0 or len(tokens) < self.min_n + 1:
            return []
        self._index(tokens)
        for n in range(min(self.max_n, len(tokens) - 1), self.min_n - 1, -1):
            end = self._ends[n].get(tuple(tokens[len(tokens) - n :]))
            if end is not None:
                return list(tokens[end : end + k])
        return []

