"""The prefix cache's blocks as routers see them: chained hashes, shared blocks counted once,
removal only when the last entry covering a block goes, snapshots and resumable streams."""

from __future__ import annotations

import asyncio

from engine.caches.blocks import BlockLedger, BlocksRemoved, BlocksStored, CacheCleared, chain

A = tuple(range(100, 140))  # 40 tokens: 2 full blocks of 16
B = A[:32] + tuple(range(500, 520))  # shares A's 2 blocks, adds 1


def stored(batch) -> list[BlocksStored]:
    return [e for e in batch.events if isinstance(e, BlocksStored)]


def test_hashes_chain_the_namespace_and_every_earlier_token():
    assert [h for h, _ in chain("ns", A, 16)] == [h for h, _ in chain("ns", A[:32], 16)]
    assert chain("ns", A, 16)[1][0] != chain("other", A, 16)[1][0]
    changed = list(A)
    changed[0] += 1
    assert chain("ns", changed, 16)[1][0] != chain("ns", A, 16)[1][0]  # block 1 folds in block 0
    assert [t for _, t in chain("ns", A, 16)] == [A[:16], A[16:32]]


def test_shared_blocks_are_stored_once_and_removed_with_their_last_entry():
    ledger = BlockLedger(block_size=16)
    ledger.entries_changed([("ns", A)], [])
    ledger.entries_changed([("ns", B)], [])
    first, second = ledger._history
    (a,) = stored(first)
    (b,) = stored(second)
    assert a.parent is None and len(a.hashes) == 2
    assert b.parent == a.hashes[-1] and b.tokens == (B[32:48],)  # only B's own block
    ledger.entries_changed([], [("ns", A)])
    assert ledger.sequence == 2  # B still covers A's blocks: nothing removed
    ledger.entries_changed([], [("ns", B)])
    (removed,) = ledger._history[-1].events
    assert isinstance(removed, BlocksRemoved) and set(removed.hashes) == set(a.hashes) | set(b.hashes)


def test_a_snapshot_lists_live_chains_after_a_clear():
    ledger = BlockLedger(block_size=16)
    ledger.entries_changed([("ns", A), ("ns", B)], [])
    snap = ledger.snapshot()
    assert isinstance(snap.events[0], CacheCleared) and snap.sequence == ledger.sequence
    assert sum(len(e.hashes) for e in stored(snap)) == 3  # every live block once
    ledger.cleared()
    assert stored(ledger.snapshot()) == []


async def test_a_stream_resumes_after_its_cursor_and_sees_new_batches():
    ledger = BlockLedger(block_size=16, history=8)
    ledger.entries_changed([("ns", A)], [])
    ledger.entries_changed([("ns", B)], [])
    stream = ledger.batches(after=1, heartbeat_s=0.05)
    assert (await anext(stream)).sequence == 2  # the history after the cursor
    assert await anext(stream) is None  # a heartbeat while nothing happens
    ledger.entries_changed([], [("ns", A), ("ns", B)])
    assert (await asyncio.wait_for(anext(stream), 5)).sequence == 3
    await stream.aclose()
    fresh = ledger.batches(after=0)
    snap = await anext(fresh)
    assert isinstance(snap.events[0], CacheCleared) and stored(snap) == []
    await fresh.aclose()
    for _ in range(10):  # the history holds 8 batches: an old cursor gets a snapshot
        ledger.entries_changed([("ns", A)], [])
        ledger.entries_changed([], [("ns", A)])
    late = ledger.batches(after=3)
    assert isinstance((await anext(late)).events[0], CacheCleared)
    await late.aclose()


def test_the_history_is_bounded_by_the_tokens_it_holds():
    ledger = BlockLedger(block_size=16, history=100, history_tokens=64)
    for i in range(10):
        ledger.entries_changed([("ns", tuple(range(i * 1000, i * 1000 + 32)))], [])  # 32 tokens a batch
    assert len(ledger._history) == 2 and ledger._history[-1].sequence == 10
    assert ledger._history_tokens == 64
