"""Prefill planning: how a prompt is cut into forward steps.

Port of the seed's ``contracts/portable/prefill.ts``. Pure arithmetic: no
tensors, no runtime policy reads, no sampling. A row (alone or in a batch)
follows the program one step at a time, and advances its position only after
executing the returned step.

Invariants of a plan over ``[start, length)`` (see ``plan_prefill``):

* steps are contiguous and cover ``[start, length)``; only the last is ``final``;
* every step has at most ``chunk_size`` positions;
* with ``tail_split`` the final step is exactly one position (token zero is
  sampled from a one-position ``decode`` append); without it the final step
  holds the remaining ``1..chunk_size`` positions;
* a snapshot boundary strictly inside ``(position, length)`` cuts the plan so
  that exactly one step ends at it, flagged ``snapshot``;
* ``phase`` is ``decode`` for one position, else ``chunk`` for a whole planned
  chunk (exactly ``chunk_size`` positions), else ``tail``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

__all__ = [
    "MAX_SAFE_INTEGER",
    "FixedPrefillPolicy",
    "PrefillPhase",
    "PrefillPolicy",
    "PrefillStep",
    "StepKind",
    "next_prefill_step",
    "plan_prefill",
    "prefill_phase",
]

#: JavaScript's ``Number.MAX_SAFE_INTEGER``; positions beyond it are rejected.
MAX_SAFE_INTEGER = 2**53 - 1


def _is_safe_integer(value: object) -> bool:
    """``Number.isSafeInteger`` for Python values: a real ``int`` (not ``bool``,
    not ``float``, even an integral one) with ``|value| <= 2**53 - 1``."""
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


@runtime_checkable
class PrefillPolicy(Protocol):
    """Request-level chunk policy. Execution consumes the selected size; model
    backends can account for their temporary workspace without changing admission."""

    def chunk_size(self, prompt_tokens: int) -> int:
        """The chunk size to prefill a prompt of ``prompt_tokens`` positions with."""
        ...


@dataclass(frozen=True, slots=True)
class FixedPrefillPolicy:
    """The same chunk size for every prompt."""

    chunk: int

    def __post_init__(self) -> None:
        if not _is_safe_integer(self.chunk) or self.chunk < 1:
            raise ValueError("invalid prefill chunk size")

    def chunk_size(self, prompt_tokens: int) -> int:
        return self.chunk


class PrefillPhase(str, Enum):
    """The phase a prompt step runs in, named by the planner that cut it.

    * ``CHUNK``: a whole planned chunk (exactly the step's chunk size);
    * ``TAIL``: any other number of positions above one: what is left after the
      whole chunks, or a piece a snapshot boundary cuts short;
    * ``DECODE``: a single position, appended through the one-position read.
    """

    CHUNK = "chunk"
    TAIL = "tail"
    DECODE = "decode"


class StepKind(str, Enum):
    """``DRAIN`` fills the cache only; ``FINAL`` is the step whose logits yield token zero."""

    DRAIN = "drain"
    FINAL = "final"


@dataclass(frozen=True, slots=True)
class PrefillStep:
    """One forward over prompt positions ``[start, end)``.

    ``snapshot``: the step ends exactly at the requested snapshot boundary.
    ``batch_yield``: when false, batch admission may finish this (short last)
    drain and token zero in one tick; otherwise execution yields between every
    drain and the next forward.
    """

    start: int
    end: int
    kind: StepKind
    snapshot: bool
    batch_yield: bool
    phase: PrefillPhase

    @property
    def size(self) -> int:
        """Number of positions the step covers."""
        return self.end - self.start


def prefill_phase(start: int, end: int, whole: bool) -> PrefillPhase:
    """The phase of a step from ``start`` to ``end`` that the planner made
    ``whole`` (a full chunk) or not. One position is always ``DECODE``."""
    if end - start == 1:
        return PrefillPhase.DECODE
    return PrefillPhase.CHUNK if whole else PrefillPhase.TAIL


def next_prefill_step(
    length: int,
    position: int,
    chunk_size: int,
    tail_split: bool,
    snapshot_at: int | None = None,
) -> PrefillStep:
    """The next step of the prefill program for a row at ``position`` of a
    ``length``-position prompt (exact port of the seed's ``nextPrefillStep``).

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
        whole = position + chunk_size <= snapshot_at
        end = position + chunk_size if whole else snapshot_at
        return PrefillStep(position, end, StepKind.DRAIN, end == snapshot_at, True,
                           prefill_phase(position, end, whole))

    remaining = length - position
    if remaining > (1 if tail_split else chunk_size):
        whole = not tail_split or chunk_size <= remaining - 1
        end = position + (chunk_size if whole else remaining - 1)
        return PrefillStep(position, end, StepKind.DRAIN, False,
                           not tail_split or remaining - 1 > chunk_size,
                           prefill_phase(position, end, whole))

    return PrefillStep(position, length, StepKind.FINAL, False, False,
                       prefill_phase(position, length, remaining == chunk_size))


def plan_prefill(
    length: int,
    chunk_size: int,
    tail_split: bool,
    snapshot_at: int | None = None,
    start: int = 0,
) -> list[PrefillStep]:
    """Every step from ``start`` up to and including the ``final`` one, by
    iterating ``next_prefill_step``. Raises its ``ValueError`` for invalid
    input, including an empty range (``start >= length``)."""
    steps: list[PrefillStep] = []
    position = start
    while True:
        step = next_prefill_step(length, position, chunk_size, tail_split, snapshot_at)
        steps.append(step)
        if step.kind is StepKind.FINAL:
            return steps
        position = step.end
