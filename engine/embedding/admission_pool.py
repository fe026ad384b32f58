"""Admission reservations for asyncio: at most ``capacity`` leases, in the shared fair order.

Invariants: a full queue rejects at once; a released lease goes straight to the
next live waiter (no newcomer overtakes); cancellation never leaks capacity.
Not thread-safe: one event loop only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import TracebackType
from typing import Callable

from ..serving.fair_queue import FairQueue
from ..tenancy import ANONYMOUS, Tenant
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


@dataclass(eq=False)
class _Waiter:
    tenant: Tenant
    priority: int
    future: asyncio.Future = field(repr=False)


class Lease:
    """One unit of a pool's capacity; ``release()`` is idempotent (also on ``with`` exit)."""

    __slots__ = ("_pool", "_released", "_queued")

    def __init__(self, pool: AdmissionPool, queued: _Waiter | None = None) -> None:
        self._pool = pool
        self._released = False
        self._queued = queued  # the waiter it was granted to, if it waited

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._pool._release(self._queued)

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
    """Fair reservations; ``capacity >= 1``, ``max_queued >= 0`` (0: never wait), else ValueError.
    Waiters are ordered by the shared ``FairQueue`` (tenants take turns, weighted)."""

    def __init__(self, capacity: int, max_queued: int = 64, aging_s: float = 5.0) -> None:
        if not is_exact_int(capacity) or capacity < 1 or not is_exact_int(max_queued) or max_queued < 0:
            raise ValueError("invalid admission capacity")
        self._capacity = capacity
        self._max_queued = max_queued
        self._active = 0
        self._closed = False
        self.clock: Callable[[], float] | None = None  # None: the running loop's time
        self._waiting: FairQueue[_Waiter] = FairQueue(aging_s, self._now)

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
            self._active += 1
            return Lease(self)
        return None

    async def acquire(self, priority: int = 0, tenant: Tenant = ANONYMOUS) -> Lease:
        """Wait for a lease; raises ``AdmissionClosed``, or ``AdmissionRejected`` at once when the queue is full."""
        lease = self.try_acquire()
        if lease is not None:
            return lease
        if self.queued >= self._max_queued:
            raise AdmissionRejected()
        waiter = _Waiter(tenant, priority, asyncio.get_running_loop().create_future())
        self._waiting.push(waiter)
        try:
            return await waiter.future
        except BaseException:  # CancelledError, or anything thrown into the wait
            if waiter.future.done() and not waiter.future.cancelled():
                if waiter.future.exception() is None:
                    waiter.future.result().release()
            else:
                waiter.future.cancel()
                self._waiting.remove(waiter)
            raise

    def close(self) -> None:
        """Reject every waiter and all later acquires with ``AdmissionClosed``."""
        self._closed = True
        for waiter in self._waiting.drain():
            if not waiter.future.done():
                waiter.future.set_exception(AdmissionClosed())

    def _release(self, queued: _Waiter | None) -> None:
        self._active -= 1
        if queued is not None:
            self._waiting.finished(queued)
        self._prune()
        if (waiter := self._waiting.choose()) is not None:
            self._waiting.started(waiter)
            self._active += 1
            waiter.future.set_result(Lease(self, waiter))

    def _prune(self) -> None:
        """Drops waiters cancelled whose tasks have not resumed yet."""
        for waiter in [w for w in self._waiting if w.future.done()]:
            self._waiting.remove(waiter)

    def _now(self) -> float:
        return self.clock() if self.clock is not None else asyncio.get_running_loop().time()
