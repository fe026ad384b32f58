"""The truncating samplers over a batch of rows, each row with its own parameters, and
the two orders they run in.

Invariants: every op is row-wise (no reduction mixes rows), so a row's result never
depends on the batch; removed ids are -inf; a sampler that is off for a row leaves that
row's scores exactly as they were, so rows using none of the newer samplers keep the
original numerics (temperature, top-k, min-p, top-p). The math follows llama.cpp's
samplers on the ids still finite (an id already removed takes no part in an entropy, a
mean or a count).
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx

from ....requests import SamplerOrder, SamplingOptions

NEG_INF = float("-inf")


def _column(values: Sequence[float]) -> mx.array:
    return mx.array(list(values), dtype=mx.float32)[:, None]


def _rows(flags: Sequence[bool]) -> mx.array:
    return mx.array(list(flags))[:, None]


def _log_softmax(scores: mx.array) -> tuple[mx.array, mx.array]:
    """(log p, p) of each row; removed ids get p 0."""
    logp = scores - mx.logsumexp(scores, axis=-1, keepdims=True)
    return logp, mx.exp(logp)


def _entropy(logp: mx.array, p: mx.array) -> mx.array:
    return -mx.sum(mx.where(p > 0, p * logp, 0.0), axis=-1, keepdims=True)


def _dynamic(o: SamplingOptions) -> bool:
    return o.dynamic_temperature is not None and o.dynamic_temperature.range > 0


def temperature(scores: mx.array, options: Sequence[SamplingOptions]) -> mx.array:
    """Divides by each row's temperature; where dynamic temperature is set, by
    ``lo + (hi - lo) * (H / log n) ** exponent`` with ``lo = max(0, t - range)``, ``hi = t + range``
    (llama.cpp's temp-ext: H the entropy, n the ids left); a temperature of 0 so reached keeps
    only the most likely id."""
    temps = _column([o.temperature for o in options])
    if not any(_dynamic(o) for o in options):
        return scores / temps
    dyn = [o.dynamic_temperature if _dynamic(o) else None for o in options]
    low = _column([max(0.0, o.temperature - d.range) if d is not None else 0.0 for o, d in zip(options, dyn)])
    high = _column([o.temperature + d.range if d is not None else 0.0 for o, d in zip(options, dyn)])
    exponent = _column([d.exponent if d is not None else 1.0 for d in dyn])
    count = mx.sum(scores > NEG_INF, axis=-1, keepdims=True).astype(mx.float32)
    logp, p = _log_softmax(scores)
    normalized = _entropy(logp, p) / mx.log(mx.maximum(count, 2.0))
    dynamic = low + (high - low) * mx.power(normalized, exponent)
    t = mx.where(_rows([_dynamic(o) for o in options]) & (count > 1), dynamic, temps)
    top_only = mx.where(scores >= scores.max(axis=-1, keepdims=True), scores, NEG_INF)
    return mx.where(t > 0, scores / mx.where(t > 0, t, 1.0), top_only)


def top_k(scores: mx.array, options: Sequence[SamplingOptions]) -> mx.array:
    vocab = scores.shape[-1]
    ks = [o.top_k if 0 < o.top_k < vocab else 0 for o in options]
    if not any(ks):
        return scores
    k_max = max(ks)
    top = mx.sort(mx.topk(scores, k_max, axis=-1), axis=-1)  # ascending: the k-th largest at k_max - k
    kth = mx.take_along_axis(top, mx.array([[k_max - max(k, 1)] for k in ks], dtype=mx.int32), axis=-1)
    kth = mx.where(mx.array(ks)[:, None] > 0, kth, NEG_INF)
    return mx.where(scores < kth, NEG_INF, scores)


def min_p(scores: mx.array, options: Sequence[SamplingOptions]) -> mx.array:
    if not any(o.min_p > 0 for o in options):
        return scores
    floor = mx.log(mx.array([o.min_p for o in options], dtype=mx.float32))[:, None]
    return mx.where(scores - scores.max(axis=-1, keepdims=True) < floor, NEG_INF, scores)


def top_p(scores: mx.array, options: Sequence[SamplingOptions]) -> mx.array:
    if not any(o.top_p < 1.0 for o in options):
        return scores
    probs = mx.softmax(scores, axis=-1)
    ordered = -mx.sort(-probs, axis=-1)
    before = mx.cumsum(ordered, axis=-1) - ordered
    p = _column([o.top_p for o in options])
    kept = mx.sum(before < p, axis=-1, keepdims=True)
    threshold = mx.take_along_axis(ordered, mx.maximum(kept - 1, 0), axis=-1)
    threshold = mx.where(p < 1.0, threshold, 0.0)  # rows without top-p keep every id
    return mx.where(probs < threshold, NEG_INF, scores)


def typical_p(scores: mx.array, options: Sequence[SamplingOptions]) -> mx.array:
    """Locally typical: ids in order of ``|-log p - H|``, kept until their mass exceeds p."""
    active = [o.typical_p < 1.0 for o in options]
    if not any(active):
        return scores
    logp, p = _log_softmax(scores)
    shifted = mx.where(scores > NEG_INF, mx.abs(-logp - _entropy(logp, p)), float("inf"))
    order = mx.argsort(shifted, axis=-1)
    ordered_shift = mx.take_along_axis(shifted, order, axis=-1)
    ordered_p = mx.take_along_axis(p, order, axis=-1)
    before = mx.cumsum(ordered_p, axis=-1) - ordered_p
    kept = mx.sum(before <= _column([o.typical_p for o in options]), axis=-1, keepdims=True)
    threshold = mx.take_along_axis(ordered_shift, mx.maximum(kept - 1, 0), axis=-1)
    return mx.where(_rows(active) & (shifted > threshold), NEG_INF, scores)


def top_n_sigma(scores: mx.array, options: Sequence[SamplingOptions]) -> mx.array:
    """Keeps the ids within n standard deviations (of the finite scores) of the largest."""
    active = [o.top_n_sigma > 0 for o in options]
    if not any(active):
        return scores
    finite = scores > NEG_INF
    count = mx.maximum(mx.sum(finite, axis=-1, keepdims=True).astype(mx.float32), 1.0)
    mean = mx.sum(mx.where(finite, scores, 0.0), axis=-1, keepdims=True) / count
    std = mx.sqrt(mx.sum(mx.where(finite, mx.square(scores - mean), 0.0), axis=-1, keepdims=True) / count)
    floor = scores.max(axis=-1, keepdims=True) - _column([o.top_n_sigma for o in options]) * std
    return mx.where(_rows(active) & (scores < floor), NEG_INF, scores)


def xtc_applies(o: SamplingOptions, uniform: float) -> bool:
    """Whether this step's XTC draw ``uniform`` cuts (llama.cpp: chance <= probability)."""
    x = o.xtc
    return x is not None and x.probability > 0 and x.threshold <= 0.5 and uniform <= x.probability


def xtc(scores: mx.array, options: Sequence[SamplingOptions], uniforms: Sequence[float]) -> mx.array:
    """Exclude Top Choices, where ``xtc_applies``: of the ids at or above the threshold's
    probability, all but the least likely are removed (when there are two or more)."""
    active = [xtc_applies(o, u) for o, u in zip(options, uniforms)]
    if not any(active):
        return scores
    p = mx.softmax(scores, axis=-1)
    above = p >= _column([o.xtc.threshold if a and o.xtc is not None else 2.0 for o, a in zip(options, active)])
    least = mx.min(mx.where(above, p, float("inf")), axis=-1, keepdims=True)
    many = mx.sum(above, axis=-1, keepdims=True) >= 2
    return mx.where(_rows(active) & many & above & (p > least), NEG_INF, scores)


def truncate(scores: mx.array, options: Sequence[SamplingOptions], xtc_uniforms: Sequence[float]) -> mx.array:
    """Rows of one order (``options[0].order``), scaled and truncated in that order."""
    if options[0].order is SamplerOrder.LLAMA_CPP:
        scores = top_n_sigma(scores, options)
        scores = top_k(scores, options)
        scores = typical_p(scores, options)
        scores = top_p(scores, options)
        scores = min_p(scores, options)
        scores = xtc(scores, options, xtc_uniforms)
        return temperature(scores, options)
    scores = temperature(scores, options)
    scores = top_k(scores, options)
    scores = min_p(scores, options)
    scores = top_p(scores, options)
    scores = typical_p(scores, options)
    scores = top_n_sigma(scores, options)
    return xtc(scores, options, xtc_uniforms)
