"""The decode batch: left-padded batch KV caches over mlx-lm's cache classes.

A row prefilled into its own per-layer caches joins with ``join`` (each cache's
``merge`` builds its batch form, e.g. KVCache -> BatchKVCache, RotatingKVCache ->
BatchRotatingKVCache, then ``extend`` appends it); finished rows leave with
``keep`` (``filter``). Any architecture whose caches implement merge/extend/filter
works, sliding-window ones included. The batch holds no request state.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn


class DecodeBatch:
    def __init__(self, model: nn.Module):
        self._model = model
        self.caches: list[Any] | None = None
        self.size = 0

    def join(self, row_caches: Sequence[Any]) -> None:
        """Appends one row (its per-layer caches) as the last batch row."""
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

    def forward(self, tokens: Sequence[int]) -> mx.array:
        """One decode step: feeds one token per row, returns scores [B, V]."""
        inputs = mx.array(tokens, dtype=mx.int32)[:, None]
        return self._model(inputs, cache=self.caches)[:, -1, :]

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.caches or ())
