"""Prefill planning: how a prompt is cut into forward steps.

Pure arithmetic, no tensors, no policy reads. A sequence follows the plan one step at a
time and advances its position only after executing the returned step.

Invariants of the plan over ``[start, length)`` (iterate ``next_prefill_step``):

* steps are contiguous and cover ``[start, length)``; only the last is ``FINAL``;
* every step has at most ``chunk_size`` positions;
* with ``tail_split`` the final step is exactly one position (token zero is chosen
  from a one-position decode append); without it the final step holds the
  remaining ``1..chunk_size`` positions;
* a snapshot boundary strictly inside ``(position, length)`` cuts the plan so that
  exactly one step ends at it, flagged ``snapshot``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["MAX_SAFE_INTEGER", "PrefillStep", "StepKind", "next_prefill_step"]

#: JavaScript's ``Number.MAX_SAFE_INTEGER``; positions beyond it are rejected.
MAX_SAFE_INTEGER = 2**53 - 1


def _is_safe_integer(value: object) -> bool:
    """``Number.isSafeInteger`` for Python values: a real ``int`` (not ``bool``,
    not ``float``, even an integral one) with ``|value| <= 2**53 - 1``."""
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


class StepKind(str, Enum):
    """``DRAIN`` fills the cache only; ``FINAL`` is the step whose scores yield token zero."""

    DRAIN = "drain"
    FINAL = "final"


@dataclass(frozen=True, slots=True)
class PrefillStep:
    """One forward over prompt positions ``[start, end)``; ``snapshot``: the step ends
    exactly at the requested snapshot boundary."""

    start: int
    end: int
    kind: StepKind
    snapshot: bool

    @property
    def size(self) -> int:
        """Number of positions the step covers."""
        return self.end - self.start


def next_prefill_step(
    length: int,
    position: int,
    chunk_size: int,
    tail_split: bool,
    snapshot_at: int | None = None,
) -> PrefillStep:
    """The next step for a sequence at ``position`` of a ``length``-position prompt.

    Raises ``ValueError("invalid prefill position or chunk size")`` unless
    ``length``, ``position`` and ``chunk_size`` are safe integers with
    ``chunk_size >= 1`` and ``0 <= position < length``; then
    ``ValueError("invalid prefill snapshot boundary")`` unless ``snapshot_at``
    is ``None`` or a safe integer in ``[0, length]``. A boundary at or before
    ``position``, or at ``length``, is ignored. ``tail_split`` is read for its
    truth value, as the seed does.
    """
    if (
        not _is_safe_integer(length)
        or not _is_safe_integer(position)
        or not _is_safe_integer(chunk_size)
        or chunk_size < 1
        or position < 0
        or position >= length
    ):
        raise ValueError("invalid prefill position or chunk size")
    if snapshot_at is not None and (not _is_safe_integer(snapshot_at) or snapshot_at < 0 or snapshot_at > length):
        raise ValueError("invalid prefill snapshot boundary")

    if snapshot_at is not None and position < snapshot_at < length:
        end = min(position + chunk_size, snapshot_at)
        return PrefillStep(position, end, StepKind.DRAIN, end == snapshot_at)

    remaining = length - position
    if remaining > (1 if tail_split else chunk_size):
        end = position + (min(chunk_size, remaining - 1) if tail_split else chunk_size)
        return PrefillStep(position, end, StepKind.DRAIN, False)

    return PrefillStep(position, length, StepKind.FINAL, False)
