"""Which adapter each row of a forward uses, as the adapted layers read it.

Invariant: with no adapter row, ``rows`` is None and layers return the base output untouched;
masks are built once per forward and layout and shared by layers with the same members.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import mlx.core as mx
import numpy as np

#: One layer's members in column order: (adapter key, rank, scale).
Layout = tuple[tuple[str, int, float], ...]


class Routing:
    def __init__(self) -> None:
        self.rows: tuple[str, ...] | None = None
        self._masks: dict[tuple[Layout, mx.Dtype], mx.array | None] = {}
        self._indices: dict[tuple[str, ...], mx.array | None] = {}

    @contextmanager
    def routed(self, keys: Sequence[str]) -> Iterator[None]:
        """Within the block, forwards are built for rows using ``keys`` ("" = base)."""
        self.rows = tuple(keys) if any(keys) else None
        try:
            yield
        finally:
            self.rows = None
            self._masks.clear()
            self._indices.clear()

    def mask(self, layout: Layout, dtype: mx.Dtype) -> mx.array | None:
        """[rows, 1, total rank] scales for ``layout``; None when no row uses its members."""
        if self.rows is None:
            return None
        cached = (layout, dtype)
        if cached not in self._masks:
            self._masks[cached] = _mask(self.rows, layout, dtype)
        return self._masks[cached]

    def index(self, keys: tuple[str, ...]) -> mx.array | None:
        """Per row, 1 + its adapter's position among ``keys`` (0: none); None when no row uses them."""
        if self.rows is None:
            return None
        if keys not in self._indices:
            where = {key: i + 1 for i, key in enumerate(keys)}
            picks = [where.get(key, 0) for key in self.rows]
            self._indices[keys] = mx.array(picks, dtype=mx.int32) if any(picks) else None
        return self._indices[keys]


def _mask(rows: tuple[str, ...], layout: Layout, dtype: mx.Dtype) -> mx.array | None:
    columns: dict[str, tuple[int, int, float]] = {}
    start = 0
    for key, rank, scale in layout:
        columns[key] = (start, start + rank, scale)
        start += rank
    mask = np.zeros((len(rows), 1, start), dtype=np.float32)
    used = False
    for i, key in enumerate(rows):
        if key in columns:
            begin, end, scale = columns[key]
            mask[i, 0, begin:end] = scale
            used = True
    return mx.array(mask, dtype=dtype) if used else None
