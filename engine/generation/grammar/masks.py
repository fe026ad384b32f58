"""The token masks of one step: every constrained site filled at once, then applied.
Free rows, and sites past a refused draft (never kept), stay all-allowed."""

from __future__ import annotations

import os
import threading
import time
from typing import Sequence

import mlx.core as mx
import numpy as np
from llguidance import LLExecutor, LLMatcher
from llguidance.numpy import (
    allocate_token_bitmask,
    fill_next_token_bitmask,
    fill_next_token_bitmask_par,
    fill_next_token_bitmask_par_with_draft_tokens,
)

from .constraint import Constraint

_NEG_INF_BITS = np.uint32(0xFF800000)  # float32 -inf
# On two cores or fewer the pool only adds a hand-off: fill on the engine thread.
_PARALLEL = (os.cpu_count() or 1) > 2
_executor: LLExecutor | None = None
_executor_lock = threading.Lock()


def executor() -> LLExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = LLExecutor()
        return _executor


def bias(bits: np.ndarray, vocab: int) -> np.ndarray:
    """Bitmasks [sites, words] as a float32 bias [sites, vocab]: 0 allowed, -inf not."""
    allowed = np.unpackbits(bits.view(np.uint8), axis=-1, count=vocab, bitorder="little")
    out = np.subtract(allowed, 1, dtype=np.uint32)  # 0 / 0xFFFFFFFF
    return np.bitwise_and(out, _NEG_INF_BITS, out=out).view(np.float32)


def _on_metal() -> bool:
    return mx.default_device() == mx.gpu and mx.metal.is_available()


class SiteMasks:
    def __init__(self, bits: np.ndarray, vocab: int):
        self.bits = bits  # [sites, words]
        self._bias = None if _on_metal() else mx.array(bias(bits, vocab))

    def apply(self, scores: mx.array) -> mx.array:
        """``scores`` [sites, vocab] with disallowed ids at -inf (lazy)."""
        if self._bias is None:
            from llguidance.mlx import apply_token_bitmask  # its Metal kernel

            return apply_token_bitmask(scores, self.bits)
        return scores + self._bias


def _fill(rows: list[tuple[LLMatcher, int]], bits: np.ndarray) -> None:
    if _PARALLEL and len(rows) > 1:
        fill_next_token_bitmask_par(executor(), rows, bits)
    else:
        for matcher, index in rows:
            fill_next_token_bitmask(matcher, bits, index)


def site_masks(constraints: Sequence[Constraint | None], vocab: int,
               drafts: Sequence[Sequence[int]] | None = None) -> SiteMasks | None:
    """Row ``i`` (constrained by ``constraints[i]``, None: free) has ``1 + len(drafts[i])``
    consecutive sites. None when no row is constrained."""
    present = [c for c in constraints if c is not None]
    if not present:
        return None
    started = time.perf_counter()
    widths = [1 + len(d) for d in drafts] if drafts is not None else [1] * len(constraints)
    firsts = np.cumsum([0, *widths[:-1]]).tolist()
    bits = allocate_token_bitmask(sum(widths), vocab)  # all allowed
    rows = [(c.matcher, first, list(d)) for c, first, d in zip(constraints, firsts, drafts or [()] * len(widths))
            if c is not None]
    if plain := [(m, first) for m, first, d in rows if not d]:
        _fill(plain, bits)
    if drafted := [row for row in rows if row[2]]:
        fill_next_token_bitmask_par_with_draft_tokens(executor(), drafted, bits)
    masks = SiteMasks(bits, vocab)
    present[0].stats.masked(time.perf_counter() - started, sum(w for c, w in zip(constraints, widths) if c is not None))
    return masks
