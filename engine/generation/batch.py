"""The running rows' caches as mlx-lm batch caches, and one forward over them.

A row prefilled into its own per-layer caches joins with ``join`` (each cache's
``merge`` builds its batch form - KVCache -> BatchKVCache, RotatingKVCache ->
BatchRotatingKVCache, ArraysCache stays itself - and ``extend`` appends it); rows
leave with ``keep`` (``filter``). ``step`` feeds every row k >= 1 tokens (rows may
differ in k: shorter feeds are right-padded, announced to the caches with
``prepare``, and the padding is moved to the left by ``finalize``) and returns the
scores of every fed position. ``rollback`` drops each row's last n positions.

The batch holds no request state: row ``i`` is whatever the scheduler put there.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache, KVCache, make_prompt_cache


def can_roll_back(model: nn.Module) -> bool:
    """Whether rows of this model can drop computed positions: every layer keeps a
    plain KV cache (sliding windows and recurrent state cannot be rolled back)."""
    return all(type(c) is KVCache for c in make_prompt_cache(model))


class Batch:
    def __init__(self, model: nn.Module):
        self._model = model
        self.caches: list[Any] | None = None
        self.size = 0

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.caches or ())

    def join(self, row_caches: Sequence[Any]) -> None:
        """Appends one row (its per-layer caches, which stay the caller's) as the last row."""
        merged = [type(c).merge([c]) for c in row_caches]
        if self.caches is None:
            self.caches = merged
        else:
            for batch_cache, row_cache in zip(self.caches, merged):
                batch_cache.extend(row_cache)
        self.size += 1

    def keep(self, indices: Sequence[int]) -> None:
        """Keeps only the given rows, in the given order; frees the others' KV."""
        if not indices:
            self.caches, self.size = None, 0
            return
        if list(indices) == list(range(self.size)):
            return
        keep = mx.array(list(indices), dtype=mx.int32)
        for cache in self.caches or ():
            cache.filter(keep)
        self.size = len(indices)

    def extract(self, index: int) -> list[Any]:
        """A copy of row ``index``'s caches in single-row form (e.g. for the prefix cache)."""
        return [c.extract(index) for c in self.caches or ()]

    def step(self, feeds: Sequence[Sequence[int]]) -> mx.array:
        """Feeds row ``i`` the tokens ``feeds[i]`` (at least one each); returns scores
        [B, K, V] with K the longest feed; row ``i``'s are valid at ``[0, len(feeds[i]))``."""
        lengths = [len(f) for f in feeds]
        if len(feeds) != self.size or min(lengths) < 1:
            raise ValueError("one feed of at least one token per row is required")
        width = max(lengths)
        padding = [width - n for n in lengths]
        ragged = any(padding)
        inputs = mx.array([list(f) + [0] * p for f, p in zip(feeds, padding)], dtype=mx.int32)
        if ragged:
            for cache in self.caches:
                cache.prepare(lengths=lengths, right_padding=padding)
        scores = self._model(inputs, cache=self.caches)
        if ragged:
            for cache in self.caches:
                cache.finalize()
        return scores

    def rollback(self, counts: Sequence[int]) -> None:
        """Drops the last ``counts[i]`` computed positions of row ``i``. Rows share a
        trim of the smallest count; the rest are rolled into each row's left padding."""
        if len(counts) != self.size or min(counts, default=0) < 0:
            raise ValueError("one non-negative count per row is required")
        if not any(counts):
            return
        if not all(isinstance(c, BatchKVCache) for c in self.caches):
            raise RuntimeError("this model's caches cannot roll back")
        shared = min(counts)
        rest = [n - shared for n in counts]
        for cache in self.caches:
            if shared:
                cache.trim(shared)
            if any(rest):
                cache.prepare(right_padding=rest)
                cache.finalize()
