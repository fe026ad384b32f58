"""The preparation pool: tokenizing and chat-template rendering, off the event loop, bounded.

Invariants: jobs run on the pool's own threads, never in asyncio's default executor; at most
``threads + queue`` jobs are held (running or waiting) at once, and one tenant at most its share;
a job beyond either is refused at once (``PreparationFull``: RESOURCE_EXHAUSTED with a retry
delay), never queued without bound. Only the event loop counts.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from .errors import QueueFull
from .tenancy import Tenant

T = TypeVar("T")
RETRY_AFTER_S = 0.5  # a full pool frees a slot within a tokenization or two


class PreparationFull(QueueFull):
    """The preparation pool, or the tenant's share of it, is full (RESOURCE_EXHAUSTED)."""

    reason = "PREPARATION_FULL"


class Preparation:
    def __init__(self, threads: int = 4, queue: int = 64, tenant_share: int = 0):
        self.threads = max(1, threads)
        self.capacity = self.threads + max(0, queue)
        self.tenant_share = tenant_share or max(1, (self.capacity + 1) // 2)
        self._executor: ThreadPoolExecutor | None = None  # made at the first job (its threads on demand)
        self._held = 0
        self._by_tenant: dict[str, int] = {}

    @classmethod
    def of(cls, limits) -> Preparation:
        """The pool ``limits`` (an ``engine.validation.Limits``) describe."""
        return cls(limits.prep_threads, limits.prep_queue, limits.prep_tenant_share)

    @property
    def held(self) -> int:
        """Jobs running or waiting now."""
        return self._held

    async def run(self, tenant: Tenant, fn: Callable[..., T], *args) -> T:
        """``fn(*args)`` on a pool thread, held against the pool and ``tenant``'s share meanwhile."""
        name = tenant.name
        held = self._by_tenant.get(name, 0)
        if self._held >= self.capacity:
            raise PreparationFull(f"the preparation pool holds {self._held} jobs, its limit (--prep-threads "
                                  f"plus --prep-queue); retry later", retry_after_s=RETRY_AFTER_S)
        if held >= self.tenant_share:
            who = repr(name) if name else "anonymous"
            raise PreparationFull(f"tenant {who} holds {held} preparation jobs, its share of the pool "
                                  f"(--prep-tenant-share); retry later", retry_after_s=RETRY_AFTER_S)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="prepare")
        self._held += 1
        self._by_tenant[name] = held + 1
        try:
            return await asyncio.wrap_future(self._executor.submit(fn, *args))
        finally:
            self._held -= 1
            left = self._by_tenant[name] - 1
            if left:
                self._by_tenant[name] = left
            else:
                del self._by_tenant[name]

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
