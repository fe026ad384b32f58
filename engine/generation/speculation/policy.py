"""A row's speculation and how many drafts it gets: its recent acceptance, capped by
what the step can afford."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ...requests import SpeculationMode
from .ngram import NgramIndex

_PAUSE_MAX = 64


def step_allowance(rows: int, step_tokens: int, max_rows: int | None = None) -> int:
    """The most drafts one row may feed in a step of ``rows`` rows (none past ``max_rows``)."""
    if max_rows is not None and rows > max_rows:
        return 0
    return max(0, step_tokens // max(rows, 1) - 1)


@dataclass
class Acceptance:
    max_drafts: int
    rate: float = 0.5  # recent accepted fraction (exponential average)
    pause: int = 0  # steps left without proposing
    next_pause: int = 4
    proposed: int = 0  # totals, reported in Usage
    accepted: int = 0

    def wanted(self) -> int:
        """Drafts to ask for this step (0: none)."""
        if self.max_drafts <= 0:
            return 0
        if self.pause > 0:
            self.pause -= 1
            return 0
        return max(1, min(self.max_drafts, round(self.max_drafts * self.rate + 0.5)))

    def record(self, proposed: int, accepted: int) -> None:
        if proposed <= 0:
            return
        self.proposed += proposed
        self.accepted += accepted
        self.rate = 0.6 * self.rate + 0.4 * (accepted / proposed)
        if accepted == 0 and self.rate < 0.2:
            self.pause, self.next_pause = self.next_pause, min(self.next_pause * 2, _PAUSE_MAX)
        elif accepted > 0:
            self.next_pause = 4


@dataclass
class Speculation:
    mode: SpeculationMode
    acceptance: Acceptance
    ngram: NgramIndex | None = field(default=None)

    @classmethod
    def create(cls, mode: SpeculationMode, max_drafts: int) -> "Speculation":
        return cls(mode, Acceptance(max_drafts), NgramIndex() if mode is SpeculationMode.NGRAM else None)

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` n-gram drafts from the sequence's own tokens."""
        return self.ngram.propose(tokens, k) if self.ngram is not None else []
