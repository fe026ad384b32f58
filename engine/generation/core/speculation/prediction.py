"""Drafts from a request's prediction of its output: the prediction's tokens after the
point the output has reached in it. After a mismatch that point is lost until the
output's last tokens occur in the prediction again (longest match first; the nearest
at or after where it was lost, else the latest before; a one-token match only close
ahead), so substitutions, insertions and deletions all rejoin it. Drafts double with
the tokens the output has followed at the current alignment (2 ** run, at most 16;
none while only one token has), so a chance match costs few drafts and a long
agreement gets many; meanwhile the row's other sources draft."""

from __future__ import annotations

from typing import Sequence

import numpy as np

_MAX_N = 4  # the longest output suffix looked up
_NEAR = 16  # how far ahead a one-token match may rejoin
_START_RUN = 2  # the output's start is taken as a two-token match with the prediction's
_CONFIRMED = 2  # a one-token rejoin drafts once the next token follows it too


class PredictionDrafts:
    def __init__(self, tokens: Sequence[int]):
        self.tokens = tuple(tokens)
        self._array = np.asarray(self.tokens, dtype=np.int64)
        self._at: int | None = 0  # where the next output token is expected; None: lost
        self._lost_at = 0  # where it was last known
        self._seen = 0  # output tokens followed so far
        self._run = _START_RUN  # tokens followed at the current alignment

    @property
    def confidence(self) -> float:
        """How likely the next token follows the prediction, from the current run alone."""
        return self._run / (self._run + 2) if self._at is not None else 0.0

    def propose(self, tokens: Sequence[int], start: int, k: int) -> list[int]:
        """Up to ``k`` drafts to follow the output, ``tokens[start:]`` (not copied)."""
        self._follow(tokens, start)
        if k <= 0 or self._at is None or self._run < _CONFIRMED:
            return []
        return list(self.tokens[self._at : self._at + min(k, 2 ** min(self._run, 4))])

    def _follow(self, tokens: Sequence[int], start: int) -> None:
        for i in range(start + self._seen, len(tokens)):
            if self._at is not None and self._at < len(self.tokens) and self.tokens[self._at] == tokens[i]:
                self._at += 1
                self._run += 1
                continue
            if self._at is not None:
                self._lost_at, self._at = self._at, None
            self._at, self._run = self._rejoin(tokens, start, i + 1)
        self._seen = len(tokens) - start

    def _rejoin(self, tokens: Sequence[int], start: int, end: int) -> tuple[int | None, int]:
        """(where the prediction continues after the output up to ``tokens[end - 1]``, the
        match's length); (None, 0): nowhere. A vectorized scan, no index to build."""
        for n in range(min(_MAX_N, end - start, len(self._array)), 0, -1):
            suffix = tokens[end - n : end]
            hits = self._array[: len(self._array) - n + 1] == suffix[0]
            for j in range(1, n):
                hits &= self._array[j : len(self._array) - n + 1 + j] == suffix[j]
            found = np.flatnonzero(hits) + n  # end positions, ascending
            if not len(found):
                continue
            ahead = int(np.searchsorted(found, self._lost_at + 1))
            if n == 1:
                if ahead < len(found) and found[ahead] <= self._lost_at + _NEAR:
                    return int(found[ahead]), 1
                continue
            return int(found[ahead] if ahead < len(found) else found[-1]), n
        return None, 0
