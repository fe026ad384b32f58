"""The token masks of one step: every constrained site filled at once, then applied.

``site_masks`` fills the bitmasks of all constrained rows of a step in one call to
llguidance's parallel executor (which releases the GIL; on machines of two cores or
fewer, one after the other on the engine thread) and returns ``SiteMasks``;
``sampling.choose`` applies them after the score processors and before greedy or
sampled selection, so disallowed ids get -inf and seeded draws keep their (seed,
step) keys. Rows without a constraint get an all-allowed mask: their scores are
unchanged (x + 0).

Applying on CPU: the bits are expanded on the host into an additive float32 bias
(0 or -inf, written as IEEE bit patterns with integer ops) and added with one mx
op; ``mx.where`` costs ~14 ns per element on the x86 CPU backend, the add well
under 1. With Metal, llguidance's own kernel applies the bits on the GPU.

A row with drafts (a speculative step) has one site per position: the mask after
its consumed tokens, then after each draft in turn; sites past a draft the grammar
refuses stay all-allowed, as verification never keeps a token chosen there.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Sequence

import mlx.core as mx
import numpy as np
from llguidance import LLExecutor, LLMatcher
from llguidance.numpy import (allocate_token_bitmask, fill_next_token_bitmask, fill_next_token_bitmask_par,
                              fill_next_token_bitmask_par_with_draft_tokens)

from .constraint import Constraint

_NEG_INF_BITS = np.uint32(0xFF800000)  # float32 -inf
# llguidance's pool gets 80% of the cores: one thread on two, which only adds a hand-off
# (and competes with the BLAS threads still spinning after the forward), so small
# machines fill on the engine thread itself.
_PARALLEL = (os.cpu_count() or 1) > 2
_executor: LLExecutor | None = None
_executor_lock = threading.Lock()


def executor() -> LLExecutor:
    """The process's llguidance thread pool (created on first use)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = LLExecutor()
        return _executor


def bias(bits: np.ndarray, vocab: int) -> np.ndarray:
    """llguidance bitmasks [sites, words] as a float32 bias [sites, vocab]: 0 where
    allowed, -inf where not."""
    allowed = np.unpackbits(bits.view(np.uint8), axis=-1, count=vocab, bitorder="little")  # 0 / 1
    out = np.subtract(allowed, 1, dtype=np.uint32)  # 0 / 0xFFFFFFFF, in one pass
    return np.bitwise_and(out, _NEG_INF_BITS, out=out).view(np.float32)


def _on_metal() -> bool:
    return mx.default_device() == mx.gpu and mx.metal.is_available()


class SiteMasks:
    """Allowed ids at each sample site of a step."""

    def __init__(self, bits: np.ndarray, vocab: int):
        self.bits = bits  # llguidance bitmasks [sites, words]
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
    """The masks of a step whose row ``i`` is constrained by ``constraints[i]`` (None:
    free) and has ``1 + len(drafts[i])`` consecutive sites (one without drafts).
    None when no row is constrained."""
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
