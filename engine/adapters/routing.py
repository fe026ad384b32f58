"""Which adapter each row of a forward uses, as the adapted layers read it.

The scheduler routes every forward it runs (``AdapterBank.routed``): one key per
row, in row order ("" for the base model). While no row has an adapter, ``rows`` is
None and every adapted layer returns the base output untouched. Otherwise a layer
asks for the row mask of its members (``mask``): [rows, 1, total rank], each row's
adapter's scale on that adapter's columns and zero elsewhere, so one
``(x @ A_cat) * mask @ B_cat`` adds every row's own low-rank delta. Masks and
indices are built once per forward and layout, on the host, and shared by every
layer with the same members.
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
        """[rows, 1, total rank] scales for a layer with ``layout``; None when no row
        of this forward uses any of its members."""
        if self.rows is None:
            return None
        cached = (layout, dtype)
        if cached not in self._masks:
            self._masks[cached] = _mask(self.rows, layout, dtype)
        return self._masks[cached]

    def index(self, keys: tuple[str, ...]) -> mx.array | None:
        """Per row, 1 + the position of its adapter among ``keys`` (0: none of them);
        None when no row uses any of them."""
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
