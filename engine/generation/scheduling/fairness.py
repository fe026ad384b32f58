"""The order waiting sequences start in: priority aged one level per ``aging_s``, then
start-time fair queuing between tenants on ``context_tokens / weight``. Equal
priorities start in arrival order; an idle tenant banks no credit. Engine thread only."""

from __future__ import annotations

import bisect
import itertools
import time
from dataclasses import dataclass, field
from typing import Callable

from ..sequence.state import SequenceState


@dataclass
class _Tenant:
    waiting: list[tuple[float, int, float, SequenceState]] = field(default_factory=list)  # (key, n, arrived, seq)
    tag: float = 0.0  # virtual start time of its next sequence
    running: int = 0
    weight: float = 1.0


class FairQueue:
    def __init__(self, aging_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.aging_s = aging_s
        self.clock = clock
        self.virtual_time = 0.0
        self._tenants: dict[str, _Tenant] = {}
        self._arrivals = itertools.count()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, seq: SequenceState) -> None:
        t = self._tenant(seq)
        if not t.waiting:  # becomes backlogged: no credit banked while idle
            t.tag = max(t.tag, self.virtual_time)
        arrived = self.clock()
        key = arrived - seq.priority * self.aging_s if self.aging_s > 0 else -seq.priority
        bisect.insort(t.waiting, (key, next(self._arrivals), arrived, seq), key=lambda e: e[:2])
        self._size += 1

    def remove(self, seq: SequenceState) -> bool:
        t = self._tenants.get(seq.tenant.name)
        if t is None:
            return False
        for i, entry in enumerate(t.waiting):
            if entry[3] is seq:
                del t.waiting[i]
                self._size -= 1
                self._forget(seq.tenant.name)
                return True
        return False

    def find(self, key: str) -> SequenceState | None:
        return next((seq for seq in self if seq.key == key), None)

    def __iter__(self):
        entries = [e for t in self._tenants.values() for e in t.waiting]
        return (e[3] for e in sorted(entries, key=lambda e: e[1]))

    def choose(self, eligible: Callable[[str, int, float], bool] = lambda name, running, weight: True
               ) -> SequenceState | None:
        """The next to start among tenants ``eligible`` allows; it stays queued until
        ``started``."""
        heads = [(name, t) for name, t in self._tenants.items()
                 if t.waiting and eligible(name, t.running, t.weight)]
        if not heads:
            return None
        top = max(t.waiting[0][3].priority for _, t in heads)
        now = self.clock()
        candidates = [(t.tag, t.waiting[0][1], t.waiting[0][3]) for _, t in heads
                      if self._effective(t.waiting[0], now) >= top]
        return min(candidates, key=lambda c: c[:2])[2]

    def started(self, seq: SequenceState) -> None:
        t = self._tenants[seq.tenant.name]
        t.running += 1
        self.remove(seq)
        self.virtual_time = max(self.virtual_time, t.tag)
        t.tag += max(seq.context_tokens, 1) / t.weight

    def finished(self, seq: SequenceState) -> None:
        t = self._tenants.get(seq.tenant.name)
        if t is not None:
            t.running -= 1
            self._forget(seq.tenant.name)

    def counts(self) -> dict[str, tuple[int, int]]:
        """(running, waiting) per tenant with either."""
        return {name: (t.running, len(t.waiting)) for name, t in self._tenants.items()
                if t.running or t.waiting}

    def active(self) -> list[tuple[str, int, float]]:
        """(name, running, weight) of each tenant running or waiting."""
        return [(name, t.running, t.weight) for name, t in self._tenants.items() if t.running or t.waiting]

    def drain(self) -> list[SequenceState]:
        waiting = list(self)
        for t in self._tenants.values():
            t.waiting.clear()
        self._size = 0
        return waiting

    def _effective(self, entry: tuple[float, int, float, SequenceState], now: float) -> float:
        _, _, arrived, seq = entry
        if self.aging_s <= 0:
            return seq.priority
        return seq.priority + (now - arrived) / self.aging_s

    def _tenant(self, seq: SequenceState) -> _Tenant:
        t = self._tenants.get(seq.tenant.name)
        if t is None:
            t = self._tenants[seq.tenant.name] = _Tenant(tag=self.virtual_time)
        t.weight = seq.tenant.weight if seq.tenant.weight > 0 else 1.0
        return t

    def _forget(self, name: str) -> None:
        """Drops a tenant with nothing running or waiting and no lead to remember."""
        t = self._tenants.get(name)
        if t is not None and not t.waiting and t.running <= 0 and t.tag <= self.virtual_time:
            del self._tenants[name]
