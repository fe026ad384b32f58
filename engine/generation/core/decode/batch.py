"""The running rows' caches as mlx-lm batch caches, and one forward over them; no
request state. A step's padding leaves with its rollback: at most one roll per step."""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache


class Batch:
    def __init__(self, model: nn.Module):
        self._model = model
        self.caches: list[Any] | None = None
        self.size = 0
        self._padding: list[int] | None = None  # a step's right padding not yet dropped (KV layers)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.caches or ())

    def join(self, row_caches: Sequence[Any]) -> None:
        """Appends one row as the last; ``row_caches`` stay the caller's."""
        self._settle()
        merged = [type(c).merge([c]) for c in row_caches]
        if self.caches is None:
            self.caches = merged
        else:
            for batch_cache, row_cache in zip(self.caches, merged):
                batch_cache.extend(row_cache)
        self.size += 1

    def keep(self, indices: Sequence[int]) -> None:
        """Keeps only the given rows, in that order."""
        if not indices:  # also after a failed step: nothing is left to settle
            self.caches, self.size, self._padding = None, 0, None
            return
        self._settle()
        if list(indices) == list(range(self.size)):
            return
        keep = mx.array(list(indices), dtype=mx.int32)
        for cache in self.caches or ():
            cache.filter(keep)
        self.size = len(indices)

    def extract(self, index: int) -> list[Any]:
        """A copy of row ``index``'s caches in single-row form."""
        self._settle()
        return [c.extract(index) for c in self.caches or ()]

    def forward(self, feeds: Sequence[Sequence[int]], **extra: mx.array) -> mx.array:
        """Scores [B, K, V], K the longest feed; row ``i``'s valid at ``[0, len(feeds[i]))``;
        ``extra``: the model's other inputs, padded as the feeds are."""
        lengths = [len(f) for f in feeds]
        if len(feeds) != self.size or min(lengths) < 1:
            raise ValueError("one feed of at least one token per row is required")
        self._settle()
        width = max(lengths)
        padding = [width - n for n in lengths]
        ragged = any(padding)
        inputs = mx.array([list(f) + [0] * p for f, p in zip(feeds, padding)], dtype=mx.int32)
        others = [c for c in self.caches or () if not isinstance(c, BatchKVCache)]
        if ragged:
            for cache in others:
                cache.prepare(lengths=lengths, right_padding=padding)
        scores = self._model(inputs, cache=self.caches, **extra)
        if ragged:
            for cache in others:
                cache.finalize()
            self._padding = padding
        return scores

    def forward_one(self, ids: mx.array, **extra: mx.array) -> mx.array:
        """Scores [B, 1, V] for one token per row held as an array [B] (no host read);
        only for caches that take a token without padding (plain KV)."""
        self._settle()
        return self._model(ids[:, None], cache=self.caches, **extra)

    def rollback(self, counts: Sequence[int]) -> None:
        """Drops the last ``counts[i]`` positions of row ``i`` and the step's padding."""
        if len(counts) != self.size or min(counts, default=0) < 0:
            raise ValueError("one non-negative count per row is required")
        if any(counts) and not all(isinstance(c, BatchKVCache) for c in self.caches or ()):
            raise RuntimeError("this model's caches cannot roll back")
        self._drop(counts)

    def _settle(self) -> None:
        if self._padding is not None:
            self._drop([0] * self.size)

    def _drop(self, counts: Sequence[int]) -> None:
        padding, self._padding = self._padding, None
        drops = [n + p for n, p in zip(counts, padding)] if padding else list(counts)
        if not any(drops):
            return
        shared = min(drops)
        rest = [n - shared for n in drops]
        for cache in self.caches or ():
            if not isinstance(cache, BatchKVCache):
                continue
            if shared:
                cache.trim(shared)
            if any(rest):
                cache.prepare(right_padding=rest)
                cache.finalize()
