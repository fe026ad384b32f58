"""Admission reservations for asyncio: at most ``capacity`` leases, priority with aging, tenants in turn.

Invariants: a full queue rejects at once; a released lease goes straight to the
next live waiter (no newcomer overtakes); cancellation never leaks capacity.
Not thread-safe: one event loop only.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from types import TracebackType
from typing import Callable

from ..validation import is_exact_int

__all__ = ["AdmissionClosed", "AdmissionPool", "AdmissionRejected", "Lease"]


class AdmissionRejected(Exception):
    """The wait queue is full; raised immediately, without waiting."""

    def __init__(self) -> None:
        super().__init__("admission queue is full")


class AdmissionClosed(Exception):
    """The pool is closed: raised to its waiters and to every later acquire."""

    def __init__(self) -> None:
        super().__init__("admission is closed")


@dataclass(order=True)
class _Waiter:
    key: float  # arrived - priority * aging_s: the order within a tenant
    n: int  # arrival
    arrived: float = field(compare=False)
    priority: int = field(compare=False)
    tenant: str = field(compare=False)
    future: asyncio.Future = field(compare=False)


class Lease:
    """One unit of a pool's capacity; ``release()`` is idempotent (also on ``with`` exit)."""

    __slots__ = ("_pool", "_released")

    def __init__(self, pool: AdmissionPool) -> None:
        self._pool = pool
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._pool._release()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.release()


class AdmissionPool:
    """Fair reservations; ``capacity >= 1``, ``max_queued >= 0`` (0: never wait), else ValueError."""

    def __init__(self, capacity: int, max_queued: int = 64, aging_s: float = 5.0) -> None:
        if not is_exact_int(capacity) or capacity < 1 or not is_exact_int(max_queued) or max_queued < 0:
            raise ValueError("invalid admission capacity")
        self._capacity = capacity
        self._max_queued = max_queued
        self._active = 0
        self._closed = False
        self._aging_s = aging_s
        self.clock: Callable[[], float] | None = None  # None: the running loop's time
        self._arrivals = itertools.count()
        self._grants = itertools.count()
        self._served: dict[str, int] = {}  # tenant -> when it was last granted a waiter's lease
        # A done future is a cancelled waiter not yet pruned.
        self._waiting: list[_Waiter] = []

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def max_queued(self) -> int:
        return self._max_queued

    @property
    def active(self) -> int:
        return self._active

    @property
    def queued(self) -> int:
        self._prune()
        return len(self._waiting)

    @property
    def closed(self) -> bool:
        return self._closed

    def try_acquire(self) -> Lease | None:
        """A lease if capacity is free now, else ``None``; raises ``AdmissionClosed`` once closed."""
        if self._closed:
            raise AdmissionClosed()
        if self._active < self._capacity:
            return self._lease()
        return None

    async def acquire(self, priority: int = 0, tenant: str = "") -> Lease:
        """Wait for a lease; raises ``AdmissionClosed``, or ``AdmissionRejected`` at once when the queue is full."""
        lease = self.try_acquire()
        if lease is not None:
            return lease
        if self.queued >= self._max_queued:
            raise AdmissionRejected()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Lease] = loop.create_future()
        now = self._now()
        key = now - priority * self._aging_s if self._aging_s > 0 else -priority
        self._waiting.append(_Waiter(key, next(self._arrivals), now, priority, tenant, waiter))
        try:
            return await waiter
        except BaseException:  # CancelledError, or anything thrown into the wait
            if waiter.done() and not waiter.cancelled():
                if waiter.exception() is None:
                    waiter.result().release()
            else:
                waiter.cancel()
                self._prune()
            raise

    def close(self) -> None:
        """Reject every waiter and all later acquires with ``AdmissionClosed``."""
        self._closed = True
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            if not waiter.future.done():
                waiter.future.set_exception(AdmissionClosed())

    def _lease(self) -> Lease:
        self._active += 1
        return Lease(self)

    def _release(self) -> None:
        self._active -= 1
        self._prune()
        if self._waiting:
            waiter = self._next()
            self._waiting.remove(waiter)
            self._served[waiter.tenant] = next(self._grants)
            waiter.future.set_result(self._lease())

    def _next(self) -> _Waiter:
        heads: dict[str, _Waiter] = {}
        for w in self._waiting:
            if w.tenant not in heads or w < heads[w.tenant]:
                heads[w.tenant] = w
        top = max(w.priority for w in heads.values())
        now = self._now()
        level = (lambda w: w.priority) if self._aging_s <= 0 else (
            lambda w: w.priority + (now - w.arrived) / self._aging_s)
        candidates = [w for w in heads.values() if level(w) >= top]
        return min(candidates, key=lambda w: (self._served.get(w.tenant, -1), w.n))

    def _now(self) -> float:
        return self.clock() if self.clock is not None else asyncio.get_running_loop().time()

    def _prune(self) -> None:
        if any(w.future.done() for w in self._waiting):
            self._waiting = [w for w in self._waiting if not w.future.done()]
        live = {w.tenant for w in self._waiting}
        if len(self._served) > len(live):  # forget tenants with nobody waiting
            self._served = {t: n for t, n in self._served.items() if t in live}
