"""Inputs of concurrent Embed requests merged into shared forwards (continuous batching).

Invariants: one forward runs at a time; what arrives meanwhile waits for the next, which takes
pending inputs oldest first up to the model's batch size and token budget; a request's results
and their indices do not depend on what it was batched with; a cancelled request's inputs
leave the queue (or their results are dropped); whatever fails, forward or driver, every
waiter it holds hears of it.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable, Sequence

import numpy as np

from .pooling import EmbeddingModel, EmbeddingResult, l2_normalize


@dataclass(eq=False)
class _Item:
    ids: list[int]
    index: int  # in its request
    results: asyncio.Queue  # its request's: (index, result) or an exception
    normalize: bool
    dimensions: int | None
    arrived: float = field(default_factory=time.perf_counter)


class Batcher:
    """``run(fn)`` runs ``fn`` on the engine thread (and is how faults surface); ``wait_s``
    bounds how long a forward waits to fill up while no forward runs."""

    def __init__(self, run: Callable[[Callable], Awaitable], wait_s: float = 0.002):
        self._run = run
        self.wait_s = wait_s
        self._pending: collections.deque[_Item] = collections.deque()
        self._wake = asyncio.Event()
        self._driver: asyncio.Task | None = None
        self.forwards = 0  # forwards run, for stats and tests
        self.rows = 0  # inputs embedded by them

    @property
    def pending(self) -> int:
        """Inputs waiting for a forward."""
        return len(self._pending)

    async def embed(self, model: EmbeddingModel, ids_list: Sequence[list[int]], *, normalize: bool,
                    dimensions: int | None) -> AsyncIterator[tuple[int, EmbeddingResult]]:
        """(position in ``ids_list``, result) as the forwards that hold them finish."""
        results: asyncio.Queue = asyncio.Queue()
        items = [_Item(list(ids), i, results, normalize, dimensions) for i, ids in enumerate(ids_list)]
        self._pending.extend(items)
        self._wake.set()
        if self._driver is None or self._driver.done():
            self._driver = asyncio.create_task(self._drive(model))
        try:
            for _ in items:
                got = await results.get()
                if isinstance(got, BaseException):
                    raise got
                yield got
        finally:  # cancelled or failed: what has not run leaves the queue
            live = set(map(id, items))
            self._pending = collections.deque(i for i in self._pending if id(i) not in live)

    async def _drive(self, model: EmbeddingModel) -> None:
        batch: list[_Item] = []
        try:
            while self._pending:
                await self._fill(model)
                batch = self._take(model)
                if not batch:
                    continue
                try:
                    pooled = await self._run(lambda: model._forward([item.ids for item in batch]))
                except BaseException as exc:  # every waiter of the batch hears of it
                    _fail(batch, exc)
                    batch = []
                    if not isinstance(exc, Exception):
                        raise
                    continue
                self.forwards += 1
                self.rows += len(batch)
                for item, row in zip(batch, pooled):
                    item.results.put_nowait((item.index, _result(row, item)))
                batch = []
        except BaseException as exc:  # a fault of the driver itself: no waiter is left waiting
            _fail([*batch, *self._pending], exc)
            self._pending.clear()
            raise

    async def _fill(self, model: EmbeddingModel) -> None:
        """Waits (at most ``wait_s`` from the oldest input) while the next forward has room."""
        while self.wait_s > 0 and len(self._pending) < model.max_batch_size:
            left = self._pending[0].arrived + self.wait_s - time.perf_counter()
            if left <= 0:
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except asyncio.TimeoutError:
                return

    def _take(self, model: EmbeddingModel) -> list[_Item]:
        """Oldest first, while the padded batch fits the model's batch size and token budget."""
        batch: list[_Item] = []
        longest = 0
        while self._pending and len(batch) < model.max_batch_size:
            longest_next = max(longest, len(self._pending[0].ids))
            if batch and (len(batch) + 1) * longest_next > model.max_batch_tokens:
                break
            batch.append(self._pending.popleft())
            longest = longest_next
        return batch


def _fail(items: Sequence[_Item], exc: BaseException) -> None:
    for item in items:
        item.results.put_nowait(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))


def _result(row: np.ndarray, item: _Item) -> EmbeddingResult:
    vector = row[:item.dimensions] if item.dimensions is not None else row
    vector = l2_normalize(vector) if item.normalize else vector.copy()
    return EmbeddingResult(vector=vector, tokens=len(item.ids))
