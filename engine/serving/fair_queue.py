"""The one order waiting work starts in, for every model kind: priority aged one level per
``aging_s``, then start-time fair queuing between tenants on ``cost / weight``. Equal
priorities start in arrival order; an idle tenant banks no credit. One thread only (the
one that owns the queue)."""

from __future__ import annotations

import bisect
import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterator, Protocol, TypeVar

from ..tenancy import Tenant


class Queued(Protocol):
    """What the queue reads of an item: whose it is and how urgent."""

    @property
    def tenant(self) -> Tenant: ...
    @property
    def priority(self) -> int: ...


T = TypeVar("T", bound=Queued)


@dataclass
class _Tenant(Generic[T]):
    waiting: list[tuple[float, int, float, T]] = field(default_factory=list)  # (key, n, arrived, item)
    tag: float = 0.0  # virtual start time of its next item
    running: int = 0
    weight: float = 1.0


class FairQueue(Generic[T]):
    """``cost(item)``: what starting it charges its tenant's share (1: tenants take turns)."""

    def __init__(self, aging_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 cost: Callable[[T], float] = lambda item: 1.0):
        self.aging_s = aging_s
        self.clock = clock
        self.virtual_time = 0.0
        self._cost = cost
        self._tenants: dict[str, _Tenant[T]] = {}
        self._arrivals = itertools.count()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, item: T) -> None:
        t = self._tenant(item)
        if not t.waiting:  # becomes backlogged: no credit banked while idle
            t.tag = max(t.tag, self.virtual_time)
        arrived = self.clock()
        key = arrived - item.priority * self.aging_s if self.aging_s > 0 else -item.priority
        bisect.insort(t.waiting, (key, next(self._arrivals), arrived, item), key=lambda e: e[:2])
        self._size += 1

    def remove(self, item: T) -> bool:
        t = self._tenants.get(item.tenant.name)
        if t is None:
            return False
        for i, entry in enumerate(t.waiting):
            if entry[3] is item:
                del t.waiting[i]
                self._size -= 1
                self._forget(item.tenant.name)
                return True
        return False

    def __iter__(self) -> Iterator[T]:
        """Waiting items in arrival order."""
        entries = [e for t in self._tenants.values() for e in t.waiting]
        return (e[3] for e in sorted(entries, key=lambda e: e[1]))

    def choose(self, eligible: Callable[[str, int, float], bool] = lambda name, running, weight: True
               ) -> T | None:
        """The next to start among tenants ``eligible`` allows; it stays queued until ``started``."""
        heads = [t for name, t in self._tenants.items() if t.waiting and eligible(name, t.running, t.weight)]
        if not heads:
            return None
        top = max(t.waiting[0][3].priority for t in heads)
        now = self.clock()
        candidates = [(t.tag, t.waiting[0][1], t.waiting[0][3]) for t in heads
                      if self._effective(t.waiting[0], now) >= top]
        return min(candidates, key=lambda c: c[:2])[2]

    def started(self, item: T) -> None:
        """Out of the queue and running: its tenant is charged its cost."""
        t = self._tenants[item.tenant.name]
        t.running += 1
        self.remove(item)
        self.virtual_time = max(self.virtual_time, t.tag)
        t.tag += max(self._cost(item), 1) / t.weight

    def finished(self, item: T) -> None:
        """A started item ended."""
        t = self._tenants.get(item.tenant.name)
        if t is not None:
            t.running -= 1
            self._forget(item.tenant.name)

    def counts(self) -> dict[str, tuple[int, int]]:
        """(running, waiting) per tenant with either."""
        return {name: (t.running, len(t.waiting)) for name, t in self._tenants.items()
                if t.running or t.waiting}

    def active(self) -> list[tuple[str, int, float]]:
        """(name, running, weight) of each tenant running or waiting."""
        return [(name, t.running, t.weight) for name, t in self._tenants.items() if t.running or t.waiting]

    def drain(self) -> list[T]:
        waiting = list(self)
        for name, t in list(self._tenants.items()):
            t.waiting.clear()
            self._forget(name)
        self._size = 0
        return waiting

    def _effective(self, entry: tuple[float, int, float, T], now: float) -> float:
        _, _, arrived, item = entry
        if self.aging_s <= 0:
            return item.priority
        return item.priority + (now - arrived) / self.aging_s

    def _tenant(self, item: T) -> _Tenant[T]:
        t = self._tenants.get(item.tenant.name)
        if t is None:
            t = self._tenants[item.tenant.name] = _Tenant(tag=self.virtual_time)
        t.weight = item.tenant.weight if item.tenant.weight > 0 else 1.0
        return t

    def _forget(self, name: str) -> None:
        """Drops a tenant with nothing running or waiting and no lead to remember."""
        t = self._tenants.get(name)
        if t is not None and not t.waiting and t.running <= 0 and t.tag <= self.virtual_time:
            del self._tenants[name]
