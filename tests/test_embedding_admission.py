"""AdmissionPool: capacity, FIFO, rejection, cancellation, close, and the
grant/cancel race."""

from __future__ import annotations

import asyncio
import random

import pytest

from engine.embedding.admission_pool import AdmissionClosed, AdmissionPool, AdmissionRejected, Lease


async def settle(ticks: int = 5) -> None:
    """Let queued callbacks and woken tasks run."""
    for _ in range(ticks):
        await asyncio.sleep(0)


def check_invariants(pool: AdmissionPool) -> None:
    assert 0 <= pool.active <= pool.capacity
    assert 0 <= pool.queued <= pool.max_queued
    if pool.queued:
        assert pool.active == pool.capacity  # nobody can overtake a live waiter


async def queue_waiter(pool: AdmissionPool) -> asyncio.Task[Lease]:
    task = asyncio.create_task(pool.acquire())
    await settle()
    return task


def acquire_now(pool: AdmissionPool) -> Lease:
    """Drive acquire() one step: it must finish without suspending."""
    coro = pool.acquire()
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("acquire suspended")


@pytest.mark.parametrize(("capacity", "max_queued"),
                         [(0, 1), (-1, 1), (1.5, 1), (True, 1), ("2", 1), (2**53, 1), (1, -1), (1, 2.0), (1, None)])
def test_invalid_configuration(capacity: object, max_queued: object) -> None:
    with pytest.raises(ValueError, match="^invalid admission capacity$"):
        AdmissionPool(capacity, max_queued)  # type: ignore[arg-type]


def test_defaults_and_properties() -> None:
    pool = AdmissionPool(3)
    assert (pool.capacity, pool.max_queued, pool.active, pool.queued, pool.closed) == (3, 64, 0, 0, False)


async def test_capacity_respected() -> None:
    pool = AdmissionPool(2)
    a, b = acquire_now(pool), acquire_now(pool)
    assert pool.active == 2
    waiter = await queue_waiter(pool)
    assert not waiter.done() and pool.queued == 1 and pool.active == 2
    check_invariants(pool)
    a.release()
    c = await asyncio.wait_for(waiter, 1)
    assert (pool.active, pool.queued) == (2, 0)
    b.release()
    c.release()
    assert pool.active == 0


async def test_fifo_order() -> None:
    pool = AdmissionPool(1)
    holder = acquire_now(pool)
    order: list[int] = []

    async def worker(i: int) -> None:
        async with await pool.acquire():
            order.append(i)
            await asyncio.sleep(0)

    tasks = []
    for i in range(6):
        tasks.append(asyncio.create_task(worker(i)))
        await settle()
    assert pool.queued == 6
    # A newcomer neither jumps the queue nor gets spare capacity.
    assert pool.try_acquire() is None
    holder.release()
    await asyncio.wait_for(asyncio.gather(*tasks), 2)
    assert order == list(range(6))
    assert (pool.active, pool.queued) == (0, 0)


async def test_queue_full_rejects_immediately() -> None:
    pool = AdmissionPool(1, max_queued=2)
    holder = acquire_now(pool)
    waiters = [await queue_waiter(pool), await queue_waiter(pool)]
    coro = pool.acquire()
    with pytest.raises(AdmissionRejected, match="^admission queue is full$"):
        coro.send(None)  # raised on the first step: it never waited
    assert (pool.active, pool.queued) == (1, 2)
    holder.release()
    for w in waiters:
        (await asyncio.wait_for(w, 1)).release()
    assert (pool.active, pool.queued) == (0, 0)


async def test_zero_queue_never_waits() -> None:
    pool = AdmissionPool(1, max_queued=0)
    lease = acquire_now(pool)
    with pytest.raises(AdmissionRejected):
        await pool.acquire()
    lease.release()
    acquire_now(pool).release()


async def test_cancelled_waiter_leaves_queue_and_frees_nothing() -> None:
    pool = AdmissionPool(1)
    holder = acquire_now(pool)
    b = await queue_waiter(pool)
    c = await queue_waiter(pool)
    b.cancel()
    with pytest.raises(asyncio.CancelledError):
        await b
    # The holder keeps its capacity; the cancelled waiter is gone.
    assert (pool.active, pool.queued) == (1, 1)
    assert not c.done()
    holder.release()
    lease_c = await asyncio.wait_for(c, 1)
    assert (pool.active, pool.queued) == (1, 0)
    lease_c.release()
    assert pool.active == 0


async def test_cancel_then_release_same_tick_skips_cancelled() -> None:
    pool = AdmissionPool(1)
    holder = acquire_now(pool)
    b = await queue_waiter(pool)
    c = await queue_waiter(pool)
    b.cancel()  # b's wait is cancelled, but its handler has not run yet
    assert pool.queued == 1
    holder.release()  # must pass over b to c
    with pytest.raises(asyncio.CancelledError):
        await b
    lease_c = await asyncio.wait_for(c, 1)
    assert (pool.active, pool.queued) == (1, 0)
    lease_c.release()
    assert pool.active == 0


@pytest.mark.parametrize("with_next", [False, True])
async def test_grant_then_cancel_same_tick_leaks_nothing(with_next: bool) -> None:
    pool = AdmissionPool(1)
    holder = acquire_now(pool)
    b = await queue_waiter(pool)
    c = await queue_waiter(pool) if with_next else None
    holder.release()  # b is granted the lease...
    assert pool.active == 1
    b.cancel()  # ...and cancelled before it could resume
    with pytest.raises(asyncio.CancelledError):
        await b
    if c is None:
        assert (pool.active, pool.queued) == (0, 0)
    else:
        lease_c = await asyncio.wait_for(c, 1)  # b's lease went on to c
        assert (pool.active, pool.queued) == (1, 0)
        lease_c.release()
        assert pool.active == 0


async def test_wait_for_timeout_leaves_queue() -> None:
    pool = AdmissionPool(1)
    holder = acquire_now(pool)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(pool.acquire(), 0.01)
    assert (pool.active, pool.queued) == (1, 0)
    holder.release()
    assert pool.active == 0


async def test_release_is_idempotent() -> None:
    pool = AdmissionPool(1)
    a = acquire_now(pool)
    b = await queue_waiter(pool)
    c = await queue_waiter(pool)
    a.release()
    a.release()  # a second release neither frees capacity nor grants c
    assert a.released
    lease_b = await asyncio.wait_for(b, 1)
    await settle()
    assert not c.done() and (pool.active, pool.queued) == (1, 1)
    lease_b.release()
    lease_c = await asyncio.wait_for(c, 1)
    lease_c.release()
    lease_c.release()
    assert (pool.active, pool.queued) == (0, 0)


async def test_context_managers() -> None:
    pool = AdmissionPool(2)
    with acquire_now(pool) as lease:
        assert pool.active == 1
    assert lease.released and pool.active == 0
    async with await pool.acquire() as lease2:
        assert pool.active == 1
    assert lease2.released and pool.active == 0
    with pytest.raises(RuntimeError):
        with acquire_now(pool):
            raise RuntimeError("boom")
    assert pool.active == 0


async def test_try_acquire() -> None:
    pool = AdmissionPool(1)
    lease = pool.try_acquire()
    assert lease is not None and pool.active == 1
    assert pool.try_acquire() is None and pool.queued == 0
    lease.release()
    assert pool.active == 0


async def test_close_rejects_waiters_and_later_acquires() -> None:
    pool = AdmissionPool(1)
    holder = acquire_now(pool)
    waiters = [await queue_waiter(pool) for _ in range(3)]
    pool.close()
    assert pool.closed and pool.queued == 0
    for w in waiters:
        with pytest.raises(AdmissionClosed, match="^admission is closed$"):
            await w
    with pytest.raises(AdmissionClosed):
        acquire_now(pool)  # fails at once
    with pytest.raises(AdmissionClosed):
        pool.try_acquire()
    # Held leases stay valid and still release cleanly.
    assert pool.active == 1
    holder.release()
    assert (pool.active, pool.queued) == (0, 0)
    with pytest.raises(AdmissionClosed):
        await pool.acquire()


async def test_close_then_cancel_same_tick() -> None:
    pool = AdmissionPool(1)
    holder = acquire_now(pool)
    b = await queue_waiter(pool)
    pool.close()
    b.cancel()
    with pytest.raises(asyncio.CancelledError):
        await b
    holder.release()
    assert (pool.active, pool.queued) == (0, 0)


@pytest.mark.parametrize("seed", range(25))
async def test_randomized_grant_cancel_stress(seed: int) -> None:
    """Many tasks, random holds, random cancellations at random points (queued,
    granted-but-not-resumed, holding). Capacity is never exceeded or leaked."""
    rng = random.Random(seed)
    capacity = rng.randint(1, 4)
    pool = AdmissionPool(capacity, max_queued=rng.randint(0, 40))
    outcomes = {"held": 0, "cancelled": 0, "rejected": 0}

    async def worker() -> None:
        for _ in range(rng.randint(0, 3)):
            await asyncio.sleep(0)
        try:
            lease = await pool.acquire()
        except AdmissionRejected:
            outcomes["rejected"] += 1
            return
        except asyncio.CancelledError:
            outcomes["cancelled"] += 1
            raise
        with lease:
            outcomes["held"] += 1
            check_invariants(pool)
            for _ in range(rng.randint(0, 4)):
                await asyncio.sleep(0)

    tasks = [asyncio.create_task(worker()) for _ in range(rng.randint(20, 120))]
    # Cancel at random ticks; sometimes in the same tick as a release.
    for _ in range(200):
        check_invariants(pool)
        if rng.random() < 0.3:
            rng.choice(tasks).cancel()
        if rng.random() < 0.2:
            lease = pool.try_acquire()
            if lease is not None:
                lease.release()
        await asyncio.sleep(0)
        if all(t.done() for t in tasks):
            break
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
    assert (pool.active, pool.queued) == (0, 0)
    assert all(t.done() for t in tasks)
    # The pool is fully usable afterwards.
    leases = [acquire_now(pool) for _ in range(capacity)]
    assert pool.try_acquire() is None
    for lease in leases:
        lease.release()
    assert pool.active == 0


@pytest.mark.parametrize("seed", range(25))
async def test_randomized_same_instant_release_and_cancel(seed: int) -> None:
    """Drive the race directly: in one tick, release some leases and cancel some
    waiters, including the ones just granted; nothing leaks and FIFO holds."""
    rng = random.Random(1000 + seed)
    capacity = rng.randint(1, 3)
    pool = AdmissionPool(capacity, max_queued=64)
    held = [acquire_now(pool) for _ in range(capacity)]
    waiters = [await queue_waiter(pool) for _ in range(rng.randint(1, 30))]
    for _ in range(10_000):
        if all(w.done() for w in waiters) and not held:
            break
        for _ in range(rng.randint(0, len(held))):
            held.pop(rng.randrange(len(held))).release()
        for w in waiters:
            if not w.done() and rng.random() < 0.25:
                w.cancel()
        await settle()
        check_invariants(pool)
        for w in waiters:
            if w.done() and not w.cancelled():
                lease = w.result()
                if not lease.released and lease not in held:
                    held.append(lease)
        if not held and pool.queued:
            raise AssertionError("waiters left behind with free capacity")
    else:
        raise AssertionError("did not drain")
    granted = [w for w in waiters if not w.cancelled()]
    assert all(w.result().released for w in granted)
    assert (pool.active, pool.queued) == (0, 0)
