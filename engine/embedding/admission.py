"""Admission reservations for asyncio: priority with aging, tenants in turn.

At most ``capacity`` leases are
held at once; up to ``max_queued`` callers wait. A freed lease goes to the waiter
with the highest effective priority (``priority`` plus one level per ``aging_s``
seconds waited); between tenants a head's effective priority is capped at the
highest base priority among the heads, and of the heads at that level the tenant
served least recently goes first (round robin). One tenant at one priority: FIFO.
Invariants:

* a full queue rejects at once (``AdmissionRejected``), it never waits;
* releasing a lease hands its capacity straight to the next live waiter, so
  while anyone is waiting ``active == capacity`` and no newcomer can overtake;
* a cancelled waiter leaves the queue and releases no other owner's capacity;
  a lease granted in the same instant as the cancellation is released again,
  so capacity never leaks;
* a lease releases once; later releases do nothing;
* ``close()`` rejects every waiter and every later acquire with
  ``AdmissionClosed``; leases already held stay valid until released.

Not thread-safe: use a pool from the one event loop that runs its waiters.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from types import TracebackType
from typing import Callable

__all__ = ["AdmissionClosed", "AdmissionPool", "AdmissionRejected", "Lease"]

_MAX_SAFE_INTEGER = 2**53 - 1


def _is_safe_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _MAX_SAFE_INTEGER


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
    """One unit of a pool's capacity. ``release()`` is idempotent and hands the
    capacity to the next FIFO waiter; ``with lease:`` / ``async with lease:``
    release on exit."""

    __slots__ = ("_pool", "_released")

    def __init__(self, pool: AdmissionPool) -> None:
        self._pool = pool
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Give the capacity back; only the first call has any effect."""
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
    """Fair reservations. A cancelled waiter releases no active owner's capacity.

    ``capacity`` must be an integer >= 1 and ``max_queued`` an integer >= 0
    (``0`` means never wait), else ``ValueError("invalid admission capacity")``.
    Single event loop only; not thread-safe.
    """

    def __init__(self, capacity: int, max_queued: int = 64, aging_s: float = 5.0) -> None:
        if not _is_safe_integer(capacity) or capacity < 1 or not _is_safe_integer(max_queued) or max_queued < 0:
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
        # Pending futures are live waiters; a done one belongs to a cancelled
        # task whose handler has not yet run, and is skipped and pruned.
        self._waiting: list[_Waiter] = []

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def max_queued(self) -> int:
        return self._max_queued

    @property
    def active(self) -> int:
        """Leases currently held (granted and not yet released)."""
        return self._active

    @property
    def queued(self) -> int:
        """Callers waiting for a lease."""
        self._prune()
        return len(self._waiting)

    @property
    def closed(self) -> bool:
        return self._closed

    def try_acquire(self) -> Lease | None:
        """A lease if capacity is free now, else ``None``; never queues.
        Raises ``AdmissionClosed`` once the pool is closed."""
        if self._closed:
            raise AdmissionClosed()
        if self._active < self._capacity:
            return self._lease()
        return None

    async def acquire(self, priority: int = 0, tenant: str = "") -> Lease:
        """Wait for a lease: higher (aged) ``priority`` first, ``tenant``s in turn.

        Returns without suspending when capacity is free. Raises
        ``AdmissionClosed`` if the pool is or becomes closed, and
        ``AdmissionRejected`` at once when ``max_queued`` callers already wait.
        Cancelling the awaiting task removes it from the queue and propagates
        ``CancelledError``; a lease granted to it in the same instant is released.
        """
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
                # Granted (or closed) just before the cancellation was delivered.
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
