"""Which waiting sequence may start: FIFO order, a slot, and its memory.

The seed's AdmissionPool rules, kept on the engine thread:

* sequences wait in arrival order; only the head may start, when a slot is free
  (fewer than ``capacity`` running) and the memory budget holds its context beside
  the running ones - nobody overtakes a head that waits for memory;
* a waiting sequence keeps its place until it starts or is cancelled; a cancelled
  one leaves the queue and takes nothing with it;
* every started sequence is released exactly once, which frees its slot and memory.

The queue is bounded by the facade, which refuses at once (RESOURCE_EXHAUSTED) a
request that would make more than ``capacity + max_queued`` in flight.
Not thread-safe: the engine thread owns it.
"""

from __future__ import annotations

from collections import deque

from ..memory.budget import MemoryBudget
from .sequence import Sequence


class Admission:
    def __init__(self, capacity: int, budget: MemoryBudget | None = None):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.budget = budget
        self._waiting: deque[Sequence] = deque()
        self._running: set[str] = set()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def reserved(self) -> int:
        """Sequences holding memory (equals ``running`` whenever a budget is set)."""
        return self.budget.reserved if self.budget is not None else 0

    def enqueue(self, seq: Sequence) -> None:
        self._waiting.append(seq)

    def withdraw(self, request_id: str) -> Sequence | None:
        """Takes a waiting sequence out of the queue (cancelled before it started)."""
        for seq in self._waiting:
            if seq.request_id == request_id:
                self._waiting.remove(seq)
                return seq
        return None

    def next_ready(self) -> Sequence | None:
        """The head, taken out of the queue, if it may start now; else None."""
        if not self._waiting or len(self._running) >= self.capacity:
            return None
        head = self._waiting[0]
        if self.budget is not None and not self.budget.try_reserve(head.request_id, head.context_tokens):
            return None
        self._waiting.popleft()
        self._running.add(head.request_id)
        return head

    def release(self, seq: Sequence) -> None:
        """Frees a started sequence's slot and memory; a second call does nothing."""
        if seq.request_id in self._running:
            self._running.discard(seq.request_id)
            if self.budget is not None:
                self.budget.release(seq.request_id)

    def drain(self) -> list[Sequence]:
        """Empties the queue (shutdown): the sequences that never started."""
        waiting, self._waiting = list(self._waiting), deque()
        return waiting
