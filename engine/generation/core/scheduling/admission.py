"""Which waiting sequence may start (fair order, a slot, its memory); engine thread only.
``running <= capacity + headroom``, the extra rows only for tenants below their
weighted share; a chosen sequence waiting for memory is never overtaken. A request of n
choices starts as one: a row and a reservation per choice, all or none (it waits for n
free rows, or for an idle model when n exceeds the capacity)."""

from __future__ import annotations

import time
from typing import Callable

from ....memory.budget import MemoryBudget
from ....serving.fair_queue import FairQueue
from ..sequence.state import SequenceState


class Admission:
    def __init__(self, capacity: int, budget: MemoryBudget | None = None, *, headroom: int = 0,
                 aging_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if headroom < 0:
            raise ValueError("headroom must be non-negative")
        self.capacity = capacity
        self.headroom = headroom
        self.budget = budget
        self.queue: FairQueue[SequenceState] = FairQueue(aging_s, clock, cost=lambda seq: seq.context_tokens)
        self._running: set[SequenceState] = set()
        self._pinned: SequenceState | None = None  # chosen, waiting for memory

    @property
    def waiting(self) -> int:
        return len(self.queue)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def reserved(self) -> int:
        """Sequences holding memory (``running`` whenever a budget is set)."""
        return self.budget.reserved if self.budget is not None else 0

    def tenants(self) -> dict[str, tuple[int, int]]:
        return self.queue.counts()

    def enqueue(self, seq: SequenceState) -> None:
        self.queue.push(seq)

    def withdraw(self, key: str) -> SequenceState | None:
        seq = next((s for s in self.queue if s.key == key), None)
        if seq is None:
            return None
        self.queue.remove(seq)
        if seq is self._pinned:
            self._pinned = None
        return seq

    def next_ready(self) -> SequenceState | None:
        """The next sequence, out of the queue, if it may start now."""
        if not self.queue:
            return None
        seq = self._pinned
        if seq is None:
            if len(self._running) < self.capacity:
                seq = self.queue.choose()
            elif len(self._running) < self.capacity + self.headroom:
                seq = self.queue.choose(self._below_share)
            if seq is None:
                return None
        elif not self._slot_for(seq):
            return None
        choices = seq.choices
        if len(choices) > 1 and self._running and len(self._running) + len(choices) > self.capacity:
            self._pinned = seq  # a row for each choice
            return None
        if self.budget is not None and not self.budget.try_reserve_all(
                [c.memory_key for c in choices], seq.context_tokens):
            self._pinned = seq
            return None
        self._pinned = None
        for choice in choices:
            self.queue.started(choice)
            self._running.add(choice)
        return seq

    def release(self, seq: SequenceState) -> None:
        """Frees a started sequence's slot and memory, and its siblings' not yet forked; a second
        call does nothing."""
        for choice in seq.choices:
            if choice in self._running:
                self._running.discard(choice)
                self.queue.finished(choice)
                if self.budget is not None:
                    self.budget.release(choice.memory_key)

    def drain(self) -> list[SequenceState]:
        """Empties the queue: the sequences that never started."""
        self._pinned = None
        return self.queue.drain()

    def _slot_for(self, seq: SequenceState) -> bool:
        running = len(self._running)
        return running < self.capacity or (
            running < self.capacity + self.headroom
            and self._below_share(seq.tenant.name, *self._own(seq.tenant.name)))

    def _own(self, name: str) -> tuple[int, float]:
        for tenant, running, weight in self.queue.active():
            if tenant == name:
                return running, weight
        return 0, 1.0

    def _below_share(self, name: str, running: int, weight: float) -> bool:
        total = sum(w for _, _, w in self.queue.active())
        return running < self.capacity * weight / total
