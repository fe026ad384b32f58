"""A sequence's speculative decoding: its proposer and its acceptance record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ...requests import SpeculationMode
from .ngram import NgramIndex
from .policy import Acceptance


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
