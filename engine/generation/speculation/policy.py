"""A row's speculation (``Speculation``: its proposer and acceptance record) and how many
drafts it gets: its recent acceptance, and what the step can afford.

A row starts trusting its proposer moderately; each verified round moves an
exponential average of the accepted fraction. Rows whose proposals keep failing stop
proposing for a while (the pause doubles each time, up to a limit), so a proposer
that does not help costs almost nothing. Across the batch, every row is padded to
the longest feed, so a step of ``rows`` rows may feed at most ``step_tokens`` tokens
in all: speculation shrinks as the batch grows and stops when rows alone fill it, or
when the step has more rows than ``speculation_rows`` (rows that keep different
numbers of positions make the batch cache copy every row's KV to realign them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ...requests import SpeculationMode
from .ngram import NgramIndex

_PAUSE_MAX = 64


def step_allowance(rows: int, step_tokens: int, max_rows: int | None = None) -> int:
    """The most drafts one row may feed in a step of ``rows`` rows (none in a step of
    more than ``max_rows`` rows)."""
    if max_rows is not None and rows > max_rows:
        return 0
    return max(0, step_tokens // max(rows, 1) - 1)


@dataclass
class Acceptance:
    """One row's speculation record."""

    max_drafts: int
    rate: float = 0.5  # recent accepted fraction (exponential average)
    pause: int = 0  # steps left without proposing
    next_pause: int = 4
    proposed: int = 0  # totals, reported in Usage
    accepted: int = 0

    def wanted(self) -> int:
        """Drafts to ask for this step (0: do not speculate now)."""
        if self.max_drafts <= 0:
            return 0
        if self.pause > 0:
            self.pause -= 1
            return 0
        return max(1, min(self.max_drafts, round(self.max_drafts * self.rate + 0.5)))

    def record(self, proposed: int, accepted: int) -> None:
        """A verified round: ``accepted`` of ``proposed`` drafts were kept."""
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
    mode: SpeculationMode  # NGRAM or DRAFT
    acceptance: Acceptance
    ngram: NgramIndex | None = field(default=None)

    @classmethod
    def create(cls, mode: SpeculationMode, max_drafts: int) -> "Speculation":
        return cls(mode, Acceptance(max_drafts), NgramIndex() if mode is SpeculationMode.NGRAM else None)

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` drafts from the sequence itself (prompt lookup); the draft model
        proposes for whole batches elsewhere."""
        return self.ngram.propose(tokens, k) if self.ngram is not None else []
