"""Mirostat v2 (llama.cpp's mirostat-v2): ids whose surprise ``-log2 p`` exceeds the row's
``mu`` are removed (the most likely id always stays), the draw is from what is left, and
``mu`` moves by ``eta * (tau - surprise)`` with the chosen id's surprise under that
truncated distribution.

Invariants: row-wise ops only; ``mu`` lives in the sequence's state and changes only
when a chosen token is committed, so a row's result depends on its own history alone.
"""

from __future__ import annotations

import math
from typing import Sequence

import mlx.core as mx

from ....requests import MirostatOptions

NEG_INF = float("-inf")
_LN2 = math.log(2.0)


def initial_mu(o: MirostatOptions) -> float:
    return 2.0 * o.tau


def truncate(scores: mx.array, mus: Sequence[float]) -> tuple[mx.array, mx.array]:
    """(scores with the too-surprising ids removed, log2 of the renormalized truncated
    distribution) for rows [n, V] already scaled by temperature."""
    logp = scores - mx.logsumexp(scores, axis=-1, keepdims=True)
    mu = mx.array(list(mus), dtype=mx.float32)[:, None]
    keep = (-logp / _LN2 <= mu) | (scores >= scores.max(axis=-1, keepdims=True))
    kept = mx.where(keep, scores, NEG_INF)
    return kept, (kept - mx.logsumexp(kept, axis=-1, keepdims=True)) / _LN2


def updated_mu(mu: float, o: MirostatOptions, surprise: float) -> float:
    """``mu`` after a token of ``surprise`` bits (under the truncated distribution)."""
    return mu - o.eta * (surprise - o.tau)
