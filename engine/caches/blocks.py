"""The prefix cache's contents as fixed-size token blocks, published for routers (KV events).

Invariants: a block's hash chains its namespace and every token before it, so equal hashes mean
equal prefixes; a block is stored while some entry covers it and removed when the last one goes;
the engine thread writes, any thread reads, and sequence numbers only grow.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import threading
import time
from dataclasses import dataclass
from typing import AsyncIterator, Iterable, Sequence

Key = tuple[str, tuple[int, ...]]  # (namespace, tokens) of a prefix-cache entry


@dataclass(frozen=True)
class BlocksStored:
    """Consecutive blocks of one chain; ``parent`` is the hash of the block before the first."""

    hashes: tuple[int, ...]
    tokens: tuple[tuple[int, ...], ...]
    parent: int | None
    namespace: str


@dataclass(frozen=True)
class BlocksRemoved:
    hashes: tuple[int, ...]


@dataclass(frozen=True)
class CacheCleared:
    pass


BlockEvent = BlocksStored | BlocksRemoved | CacheCleared


@dataclass(frozen=True)
class EventBatch:
    sequence: int
    timestamp: float
    events: tuple[BlockEvent, ...]


def chain(namespace: str, tokens: Sequence[int], block_size: int) -> list[tuple[int, tuple[int, ...]]]:
    """(hash, tokens) of each full block of ``tokens``; each hash folds in the one before it."""
    out: list[tuple[int, tuple[int, ...]]] = []
    previous = hashlib.blake2b(namespace.encode(), digest_size=8).digest()
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = tuple(tokens[start:start + block_size])
        digest = hashlib.blake2b(previous + b"".join(t.to_bytes(4, "little") for t in block), digest_size=8).digest()
        out.append((int.from_bytes(digest, "little", signed=True), block))
        previous = digest
    return out


def _tokens_in(batch: EventBatch) -> int:
    return sum(len(tokens) for e in batch.events if isinstance(e, BlocksStored) for tokens in e.tokens)


class BlockLedger:
    def __init__(self, block_size: int = 16, history: int = 4096, history_tokens: int = 1 << 20):
        self.block_size = block_size
        self._lock = threading.Lock()
        self._entries: dict[Key, list[tuple[int, tuple[int, ...]]]] = {}
        self._refs: collections.Counter[int] = collections.Counter()
        self._history: collections.deque[EventBatch] = collections.deque(maxlen=history)
        self._history_tokens = 0  # tokens the stored events in the history hold, at most history_tokens
        self._max_history_tokens = history_tokens
        self._sequence = 0
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    @property
    def sequence(self) -> int:
        return self._sequence

    def entries_changed(self, added: Iterable[Key], removed: Iterable[Key]) -> None:
        """Engine thread: entries that entered and left the cache since the last call."""
        events: list[BlockEvent] = []
        with self._lock:
            gone: list[int] = []
            for key in removed:
                for block_hash, _ in self._entries.pop(key, ()):
                    self._refs[block_hash] -= 1
                    if not self._refs[block_hash]:
                        del self._refs[block_hash]
                        gone.append(block_hash)
            if gone:
                events.append(BlocksRemoved(tuple(gone)))
            for namespace, tokens in added:
                blocks = chain(namespace, tokens, self.block_size)
                self._entries[(namespace, tokens)] = blocks
                new = [i for i, (block_hash, _) in enumerate(blocks) if not self._refs[block_hash]]
                for block_hash, _ in blocks:
                    self._refs[block_hash] += 1
                if new:  # a suffix of the chain: a covered block's prefix is covered too
                    first = new[0]
                    events.append(BlocksStored(tuple(h for h, _ in blocks[first:]), tuple(t for _, t in blocks[first:]),
                                               blocks[first - 1][0] if first else None, namespace))
            self._publish(events)

    def cleared(self) -> None:
        """Engine thread: every entry left at once."""
        with self._lock:
            self._entries.clear()
            self._refs.clear()
            self._publish([CacheCleared()])

    def _publish(self, events: list[BlockEvent]) -> None:
        if not events:
            return
        self._sequence += 1
        if len(self._history) == self._history.maxlen:
            self._history_tokens -= _tokens_in(self._history[0])
        batch = EventBatch(self._sequence, time.time(), tuple(events))
        self._history.append(batch)
        self._history_tokens += _tokens_in(batch)
        while self._history_tokens > self._max_history_tokens and len(self._history) > 1:
            self._history_tokens -= _tokens_in(self._history.popleft())
        for loop, ready in list(self._waiters):
            loop.call_soon_threadsafe(ready.set)

    def snapshot(self) -> EventBatch:
        """The live blocks as one batch (a clear, then each entry's chain) at the current sequence."""
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> EventBatch:
        events: list[BlockEvent] = [CacheCleared()]
        seen: set[int] = set()
        for (namespace, _), blocks in self._entries.items():
            new = [i for i, (block_hash, _) in enumerate(blocks) if block_hash not in seen]
            seen.update(h for h, _ in blocks)
            if new:
                first = new[0]
                events.append(BlocksStored(tuple(h for h, _ in blocks[first:]), tuple(t for _, t in blocks[first:]),
                                           blocks[first - 1][0] if first else None, namespace))
        return EventBatch(self._sequence, time.time(), tuple(events))

    async def batches(self, after: int = 0, heartbeat_s: float | None = None) -> AsyncIterator[EventBatch | None]:
        """Batches with sequence > ``after`` (0, or one the history no longer holds: a snapshot
        first), then each new one as it comes; None every ``heartbeat_s`` without one."""
        loop, ready = asyncio.get_running_loop(), asyncio.Event()
        waiter = (loop, ready)
        with self._lock:
            self._waiters.add(waiter)
            oldest = self._history[0].sequence if self._history else self._sequence + 1
            if after and oldest <= after + 1 and after <= self._sequence:
                pending = [b for b in self._history if b.sequence > after]
            else:
                pending = [self._snapshot()]
        try:
            cursor = pending[-1].sequence if pending else after
            while True:
                for batch in pending:
                    yield batch
                ready.clear()
                with self._lock:
                    pending = [b for b in self._history if b.sequence > cursor]
                if pending:
                    cursor = pending[-1].sequence
                    continue
                try:
                    await asyncio.wait_for(ready.wait(), heartbeat_s)
                except asyncio.TimeoutError:
                    yield None
                with self._lock:
                    pending = [b for b in self._history if b.sequence > cursor]
                    if pending and pending[0].sequence > cursor + 1:  # fell behind the history
                        pending = [self._snapshot()]
                if pending:
                    cursor = pending[-1].sequence
        finally:
            with self._lock:
                self._waiters.discard(waiter)
