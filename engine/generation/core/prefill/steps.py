"""How a prompt is cut into forward steps: contiguous, at most ``chunk_size`` each, only
the last ``FINAL`` (one position with ``tail_split``), one ending at a snapshot boundary."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ....validation import is_exact_int

__all__ = ["PrefillStep", "StepKind", "next_prefill_step"]


class StepKind(str, Enum):
    """``DRAIN`` fills the cache only; ``FINAL`` is the step whose scores yield token zero."""

    DRAIN = "drain"
    FINAL = "final"


@dataclass(frozen=True, slots=True)
class PrefillStep:
    """One forward over ``[start, end)``; ``snapshot``: it ends at the boundary."""

    start: int
    end: int
    kind: StepKind
    snapshot: bool

    @property
    def size(self) -> int:
        return self.end - self.start


def next_prefill_step(
    length: int,
    position: int,
    chunk_size: int,
    tail_split: bool,
    snapshot_at: int | None = None,
) -> PrefillStep:
    """The next step at ``position`` of a ``length``-position prompt.

    ValueError unless ``0 <= position < length``, ``chunk_size >= 1`` and
    ``snapshot_at`` is None or in ``[0, length]`` (safe integers); a boundary at or
    before ``position``, or at ``length``, is ignored.
    """
    if (
        not is_exact_int(length)
        or not is_exact_int(position)
        or not is_exact_int(chunk_size)
        or chunk_size < 1
        or position < 0
        or position >= length
    ):
        raise ValueError("invalid prefill position or chunk size")
    if snapshot_at is not None and (not is_exact_int(snapshot_at) or snapshot_at < 0 or snapshot_at > length):
        raise ValueError("invalid prefill snapshot boundary")

    if snapshot_at is not None and position < snapshot_at < length:
        end = min(position + chunk_size, snapshot_at)
        return PrefillStep(position, end, StepKind.DRAIN, end == snapshot_at)

    remaining = length - position
    if remaining > (1 if tail_split else chunk_size):
        end = position + (min(chunk_size, remaining - 1) if tail_split else chunk_size)
        return PrefillStep(position, end, StepKind.DRAIN, False)

    return PrefillStep(position, length, StepKind.FINAL, False)
