"""Which waiting sequence may start: fair order (``FairQueue``), a slot, and its memory.

The admission rules, kept on the engine thread, with a fair order:

* the next to start is the one ``FairQueue`` chooses (priority with aging within
  and between tenants, then weighted fair queuing on tokens; FIFO for one tenant at
  one priority). It starts when a slot is free and the memory budget holds its
  context beside the running ones. A chosen sequence that waits for memory is
  pinned: nobody starts before it, whatever arrives meanwhile;
* slots: up to ``capacity`` run. When all are taken, a tenant running fewer rows
  than its weighted share of ``capacity`` (``capacity * weight / sum of the weights
  of tenants running or waiting``) may still start one, up to ``headroom`` rows over
  ``capacity`` in all: a tenant holding every slot cannot keep another tenant's
  request waiting for one of its rows to finish. So ``running <= capacity +
  headroom`` always, and rows beyond ``capacity`` only go to tenants below share;
* a waiting sequence keeps its place until it starts or is cancelled; a cancelled
  one leaves the queue and takes nothing with it;
* every started sequence is released exactly once, which frees its slot and memory.

The queue is bounded by the facade, which refuses at once (RESOURCE_EXHAUSTED) a
request that would make more than ``capacity + max_queued`` in flight.
Not thread-safe: the engine thread owns it.
"""

from __future__ import annotations

import time
from typing import Callable

from ...memory.budget import MemoryBudget
from .fairness import FairQueue
from ..sequence.state import Sequence


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
        self.queue = FairQueue(aging_s, clock)
        self._running: set[Sequence] = set()
        self._pinned: Sequence | None = None  # chosen, waiting for memory

    @property
    def waiting(self) -> int:
        return len(self.queue)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def reserved(self) -> int:
        """Sequences holding memory (equals ``running`` whenever a budget is set)."""
        return self.budget.reserved if self.budget is not None else 0

    def tenants(self) -> dict[str, tuple[int, int]]:
        """(running, waiting) per tenant name with either."""
        return self.queue.counts()

    def enqueue(self, seq: Sequence) -> None:
        self.queue.push(seq)

    def withdraw(self, request_id: str) -> Sequence | None:
        """Takes a waiting sequence out of the queue (cancelled before it started)."""
        seq = self.queue.find(request_id)
        if seq is None:
            return None
        self.queue.remove(seq)
        if seq is self._pinned:
            self._pinned = None
        return seq

    def next_ready(self) -> Sequence | None:
        """The next sequence, taken out of the queue, if it may start now; else None."""
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
        if self.budget is not None and not self.budget.try_reserve(seq.request_id, seq.context_tokens):
            self._pinned = seq
            return None
        self._pinned = None
        self.queue.started(seq)
        self._running.add(seq)
        return seq

    def release(self, seq: Sequence) -> None:
        """Frees a started sequence's slot and memory; a second call does nothing."""
        if seq in self._running:
            self._running.discard(seq)
            self.queue.finished(seq)
            if self.budget is not None:
                self.budget.release(seq.request_id)

    def drain(self) -> list[Sequence]:
        """Empties the queue (shutdown): the sequences that never started."""
        self._pinned = None
        return self.queue.drain()

    def _slot_for(self, seq: Sequence) -> bool:
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
