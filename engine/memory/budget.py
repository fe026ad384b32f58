"""Admission by memory: ``MemoryGate`` applies the ``memory_plan`` accounting to
running requests. A request whose context can never fit is refused at once; one
that is only short for now waits.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import TracebackType

from ..hardware.machine import usable_memory
from ..memory.facts import ModelMemoryFacts
from ..memory.plan import _kv_chunk, _max_context, default_reserve, kv_bytes, transient_bytes

__all__ = ["MemoryGate", "Reservation"]


class Reservation:
    """Memory held for one admitted request; ``release()`` is idempotent.
    Usable as a context manager (released on exit)."""

    __slots__ = ("_gate", "_released", "tokens")

    def __init__(self, gate: MemoryGate, tokens: int):
        self._gate = gate
        self.tokens = tokens
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        self._gate._release(self)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


class MemoryGate:
    """Admission by memory: tracks what running requests have committed.

    The budget is ``usable - weights - reserve``. A set of running requests
    costs its KV cache plus one transient workspace (only one prefill step runs
    at a time) sized for the longest of them. With ``padded_batch`` (the default)
    the KV is charged as the engine's decode batch stores it: mlx-lm's
    ``BatchKVCache`` left-pads every row to the longest, so ``n`` rows cost
    ``n x`` the longest row's cache; without it each row is charged its own.

    ``would_ever_fit(tokens)`` says whether the request could run alone (it
    agrees with ``plan_memory(...).fits`` for the same usable memory and
    reserve): refuse at once when it cannot. ``try_reserve(tokens)`` commits
    the request's memory if it fits beside the running ones, else returns None
    (the request waits; it never fits when ``would_ever_fit`` is False).
    Thread-safe: the engine thread and the event loop may both call it.
    """

    def __init__(
        self,
        facts: ModelMemoryFacts,
        *,
        usable: int | None = None,
        reserve_bytes: int | None = None,
        prefill_chunk: int = 256,
        padded_batch: bool = True,
    ):
        if prefill_chunk < 1:
            raise ValueError("prefill_chunk must be positive")
        if usable is None:
            usable, _ = usable_memory()
        self.facts = facts
        self.usable_bytes = int(usable)
        self.reserve_bytes = default_reserve(self.usable_bytes) if reserve_bytes is None else int(reserve_bytes)
        self.budget_bytes = self.usable_bytes - facts.weights_bytes - self.reserve_bytes
        self.prefill_chunk = prefill_chunk
        self.padded_batch = padded_batch
        self._lock = threading.Lock()
        self._held: list[Reservation] = []

    def _cost(self, tokens: Sequence[int]) -> int:
        if not tokens:
            return 0
        longest = max(tokens)
        chunk = _kv_chunk(self.facts, self.prefill_chunk)
        if self.padded_batch:
            kv = kv_bytes(self.facts, longest, len(tokens), chunk=chunk)
        else:
            kv = sum(kv_bytes(self.facts, t, chunk=chunk) for t in tokens)
        return kv + transient_bytes(self.facts, self.prefill_chunk, longest, rows=len(tokens))

    def cost(self, tokens: Sequence[int]) -> int:
        """Bytes beyond weights and reserve that requests of these contexts need together."""
        return self._cost(list(tokens))

    def would_ever_fit(self, tokens: int) -> bool:
        """Whether a request of ``tokens`` context fits with nothing else running."""
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        return self.budget_bytes >= 0 and self._cost([tokens]) <= self.budget_bytes

    @property
    def max_context(self) -> int:
        """The longest context a request running alone may have."""
        if self.budget_bytes < 0:
            return 0
        return _max_context(self.facts, self.budget_bytes, self.prefill_chunk, 1)

    def try_reserve(self, tokens: int) -> Reservation | None:
        """Commits memory for a request of ``tokens`` context, or None if it does
        not fit beside what is committed now."""
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        with self._lock:
            if self.budget_bytes < 0:
                return None
            if self._cost([r.tokens for r in self._held] + [tokens]) > self.budget_bytes:
                return None
            reservation = Reservation(self, tokens)
            self._held.append(reservation)
            return reservation

    def _release(self, reservation: Reservation) -> None:
        with self._lock:
            if reservation._released:
                return
            reservation._released = True
            for i, held in enumerate(self._held):
                if held is reservation:
                    del self._held[i]
                    break

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._held)

    @property
    def committed_bytes(self) -> int:
        with self._lock:
            return self._cost([r.tokens for r in self._held])

    @property
    def available_bytes(self) -> int:
        """Budget not committed to running requests (may be negative if the budget is)."""
        with self._lock:
            return self.budget_bytes - self._cost([r.tokens for r in self._held])
