"""A row's speculation and how many drafts it gets: its recent acceptance, capped by
what the step can afford."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ....requests import SpeculationMode
from ...grammar.constraint import Constraint
from .ngram import NgramIndex
from .prediction import PredictionDrafts

_PAUSE_MAX = 64
_FORCED_MAX = 16  # a grammar's forced tokens per step, before the step's own cap


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
    """A row's draft sources, each with its own acceptance: its prediction where the
    output follows it, the tokens its grammar forces, its mode's (n-gram or draft model).
    A step takes the offer with the most tokens expected to be accepted (its drafts x its
    recent acceptance rate); a draft model drafts only where no other source has any."""

    mode: SpeculationMode  # OFF (the server's default mode is off): the prediction alone
    acceptance: Acceptance
    ngram: NgramIndex | None = field(default=None)
    prediction: PredictionDrafts | None = None
    predicted: Acceptance | None = None  # the prediction's acceptance
    forced: Acceptance | None = None  # the grammar's; None: grammar proposals off
    source: Acceptance | None = None  # whose drafts the row feeds this step

    @classmethod
    def create(cls, mode: SpeculationMode, max_drafts: int, prediction: Sequence[int] = (),
               prediction_drafts: int = 0, grammar_proposals: bool = False) -> "Speculation":
        return cls(mode, Acceptance(max_drafts), NgramIndex() if mode is SpeculationMode.NGRAM else None,
                   PredictionDrafts(prediction) if prediction else None,
                   Acceptance(prediction_drafts, rate=1.0) if prediction else None,
                   Acceptance(_FORCED_MAX, rate=1.0) if grammar_proposals else None)

    def propose(self, tokens: Sequence[int], output_from: int, cap: int,
                constraint: Constraint | None = None) -> tuple[list[int], int]:
        """(this step's drafts: of the prediction's, the grammar's and the n-gram index's,
        those with the most tokens expected to be accepted; how many a draft model should
        propose instead, when none has any); ``output_from``: where the output starts in
        ``tokens``; ``cap``: the most the step allows."""
        self.source = None
        offers: list[tuple[float, Acceptance, list[int]]] = []
        if self.prediction is not None and self.predicted is not None:
            drafts = self.prediction.propose(tokens, output_from, min(self.predicted.wanted(), cap))
            rate = max(self.predicted.rate, self.prediction.confidence)  # a long run is evidence too
            offers.append((rate * len(drafts), self.predicted, drafts))
        if self.forced is not None and constraint is not None:
            drafts = constraint.forced(min(self.forced.wanted(), cap))
            offers.append((self.forced.rate * len(drafts), self.forced, drafts))
        k = min(self.acceptance.wanted(), cap) if self.mode is not SpeculationMode.OFF else 0
        if k > 0 and self.ngram is not None:
            offers.append((self.acceptance.rate * k, self.acceptance, self.ngram.propose(tokens, k)))
        best = max((offer for offer in offers if offer[2]), key=lambda offer: offer[0], default=None)
        if best is not None:
            self.source = best[1]
            return best[2], 0
        if k > 0 and self.ngram is None:  # a draft model's
            self.source = self.acceptance
            return [], k
        return [], 0

    def record(self, proposed: int, accepted: int) -> None:
        if self.source is not None:
            self.source.record(proposed, accepted)

    @property
    def proposed(self) -> int:
        return sum(a.proposed for a in (self.acceptance, self.predicted, self.forced) if a is not None)

    @property
    def accepted(self) -> int:
        return sum(a.accepted for a in (self.acceptance, self.predicted, self.forced) if a is not None)
