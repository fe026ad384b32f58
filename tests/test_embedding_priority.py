"""The embedding AdmissionPool's order: priority with aging, and tenants in turn."""

from __future__ import annotations

import asyncio

from engine.embedding.admission_pool import AdmissionPool, Lease
from engine.tenancy import Tenant
from tests.test_embedding_admission import acquire_now, settle


async def grant_order(pool: AdmissionPool, asks: list[tuple[str, int, str]], between=None) -> list[str]:
    """Queues ``(name, priority, tenant)`` behind a held lease, then releases one lease
    at a time: the names in the order they were granted."""
    holder = acquire_now(pool)
    tasks: dict[str, asyncio.Task[Lease]] = {}
    for name, priority, tenant in asks:
        tasks[name] = asyncio.create_task(pool.acquire(priority, Tenant(tenant)))
        await settle()
        if between is not None:
            between()
    order: list[str] = []
    holder.release()
    while len(order) < len(asks):
        await settle()
        granted = [n for n, t in tasks.items() if t.done() and n not in order]
        assert len(granted) == 1
        order.append(granted[0])
        tasks[granted[0]].result().release()
    assert pool.active == 0 and pool.queued == 0
    return order


async def test_higher_priority_is_granted_first_then_arrival_order() -> None:
    asks = [("low", -1, ""), ("mid", 5, ""), ("high", 9, ""), ("mid2", 5, ""), ("zero", 0, "")]
    assert await grant_order(AdmissionPool(1, aging_s=0), asks) == ["high", "mid", "mid2", "zero", "low"]


async def aged_order(aging_s: float, low_tenant: str) -> list[str]:
    pool = AdmissionPool(1, aging_s=aging_s)
    now = [0.0]
    pool.clock = lambda: now[0]

    def later() -> None:
        now[0] += 2.0  # each ask arrives two seconds after the one before

    asks = [("low", 0, low_tenant), ("high-1", 3, "B"), ("high-2", 3, "B"), ("high-3", 3, "B")]
    return await grant_order(pool, asks, later)


async def test_aging_lifts_a_long_waiting_low_priority() -> None:
    # one tenant: low (waited 8 s: level 8) passes high-2 and high-3 (levels 7 and 5)
    assert await aged_order(1.0, "B") == ["high-1", "low", "high-2", "high-3"]
    # another tenant's low reaches the top level and takes its turn there
    assert await aged_order(1.0, "A") == ["low", "high-1", "high-2", "high-3"]
    assert await aged_order(0, "A") == ["high-1", "high-2", "high-3", "low"]


async def test_tenants_take_turns() -> None:
    asks = [(f"a{i}", 0, "A") for i in range(4)] + [("b0", 0, "B"), ("b1", 0, "B")]
    assert await grant_order(AdmissionPool(1), asks) == ["a0", "b0", "a1", "b1", "a2", "a3"]


async def test_one_tenant_at_one_priority_is_fifo() -> None:
    asks = [(f"r{i}", 2, "solo") for i in range(6)]
    assert await grant_order(AdmissionPool(1), asks) == [f"r{i}" for i in range(6)]
