"""What the scheduler, the prefiller and the decoder ask of a model-based drafter (a draft
model or a draft head), and ``NoDrafter``, the one used when the model has neither.

Invariants: every call runs on the engine thread; ``NoDrafter`` proposes nothing and holds
no memory, so a scheduler without a drafter takes the same path as one with."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Protocol, Sequence

from ..sequence.state import SequenceState


class Drafter(Protocol):
    @property
    def nbytes(self) -> int: ...

    def join(self, seq: SequenceState) -> None:
        """A row joined the batch, its prompt computed."""

    def retain(self, live: Sequence[SequenceState]) -> None:
        """Only ``live`` rows stay."""

    def prefilling(self, seqs: list[SequenceState], starts: list[int], pads: list[int]
                   ) -> AbstractContextManager[None]:
        """Around a prefill forward of ``seqs``."""

    def capturing(self, rows: Sequence[SequenceState]) -> AbstractContextManager[None]:
        """Around a decode step's forward of ``rows``."""

    def propose(self, rows: Sequence[SequenceState], wanted: Sequence[int],
                drafts: list[list[int]]) -> list[list[int]]:
        """Each row's drafts: its own where ``wanted`` is 0, else up to that many proposed."""

    def settle(self, rows: Sequence[SequenceState]) -> None:
        """After a step: what each row accepted."""


class NoDrafter:
    nbytes = 0

    def join(self, seq: SequenceState) -> None:
        pass

    def retain(self, live: Sequence[SequenceState]) -> None:
        pass

    def prefilling(self, seqs: list[SequenceState], starts: list[int], pads: list[int]
                   ) -> AbstractContextManager[None]:
        return nullcontext()

    def capturing(self, rows: Sequence[SequenceState]) -> AbstractContextManager[None]:
        return nullcontext()

    def propose(self, rows: Sequence[SequenceState], wanted: Sequence[int],
                drafts: list[list[int]]) -> list[list[int]]:
        return drafts

    def settle(self, rows: Sequence[SequenceState]) -> None:
        pass
