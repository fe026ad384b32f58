"""Choosing tokens for a whole batch at once. A seeded draw depends only on (seed,
step): a request yields the same tokens alone or inside any batch."""

from __future__ import annotations

import random
from collections import Counter
from typing import Protocol, Sequence

import mlx.core as mx

from ...requests import SamplingOptions

_MASK = 0xFFFFFFFFFFFFFFFF


def draw_uniform(seed: int, step: int) -> float:
    """The uniform in (0, 1) of draw ``step`` under ``seed`` (splitmix64)."""
    z = (seed * 0x9E3779B97F4A7C15 + (step + 1) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    return ((z >> 11) + 0.5) / float(1 << 53)


class SamplingState:
    """One sequence's options, seed and processor history; engine thread only."""

    def __init__(self, options: SamplingOptions, prompt: Sequence[int]):
        self.options = options
        self.seed = options.seed if options.seed is not None else random.getrandbits(63)
        self._window = max(options.repetition_context_size, 1)
        self._recent = list(prompt[-self._window:])
        self._counts: Counter[int] = Counter()
        self._bias: tuple[mx.array, mx.array] | None = None  # built on the engine thread

    @property
    def has_processors(self) -> bool:
        o = self.options
        return bool(o.logit_bias) or o.repetition_penalty != 1.0 or bool(o.presence_penalty or o.frequency_penalty)

    @property
    def greedy(self) -> bool:
        return self.options.temperature == 0.0

    def commit(self, token: int) -> None:
        self._counts[token] += 1
        self._recent.append(token)
        if len(self._recent) > self._window:
            del self._recent[: len(self._recent) - self._window]

    def process(self, scores: mx.array, extra: Sequence[int] = ()) -> mx.array:
        """Scores [V] with bias and penalties; ``extra`` (earlier drafts) counts as emitted."""
        o = self.options
        recent, counts = self._recent, self._counts
        if extra:
            recent = (recent + list(extra))[-self._window:]
            counts = counts + Counter(extra)
        if o.logit_bias:
            if self._bias is None:
                self._bias = (mx.array(list(o.logit_bias.keys()), dtype=mx.int32),
                              mx.array(list(o.logit_bias.values()), dtype=mx.float32))
            scores = scores.at[self._bias[0]].add(self._bias[1])
        if o.repetition_penalty != 1.0 and recent:
            ids = mx.array(sorted(set(recent)), dtype=mx.int32)
            picked = scores[ids]
            scores[ids] = mx.where(picked < 0, picked * o.repetition_penalty, picked / o.repetition_penalty)
        if (o.presence_penalty or o.frequency_penalty) and counts:
            ids = mx.array(list(counts.keys()), dtype=mx.int32)
            weights = mx.array(list(counts.values()), dtype=mx.float32)
            scores = scores.at[ids].subtract(o.presence_penalty + o.frequency_penalty * weights)
        return scores


class Masks(Protocol):
    def apply(self, scores: mx.array) -> mx.array: ...


def choose(scores: mx.array, states: Sequence[SamplingState], steps: Sequence[int],
           extras: Sequence[Sequence[int]] | None = None, masks: Masks | None = None) -> mx.array:
    """Ids [N] (lazy): site ``i`` chooses token ``steps[i]`` of ``states[i]``, its history
    extended by ``extras[i]``; ``masks`` apply after the processors."""
    scores = scores.astype(mx.float32)
    processed = [i for i, s in enumerate(states) if s.has_processors]
    if processed:
        rows = mx.stack([states[i].process(scores[i], extras[i] if extras else ()) for i in processed])
        scores[mx.array(processed, dtype=mx.int32)] = rows
    if masks is not None:
        scores = masks.apply(scores)
    chosen = mx.argmax(scores, axis=-1).astype(mx.int32)
    sampled = [i for i, s in enumerate(states) if not s.greedy]
    if not sampled:
        return chosen
    index = mx.array(sampled, dtype=mx.int32)
    options = [states[i].options for i in sampled]
    uniforms = [draw_uniform(states[i].seed, steps[i]) for i in sampled]
    chosen[index] = _draw(_mask(scores[index], options), mx.array(uniforms, dtype=mx.float32))
    return chosen


def _mask(scores: mx.array, options: Sequence[SamplingOptions]) -> mx.array:
    """Temperature, then top-k, min-p, top-p, each on what the previous left."""
    vocab = scores.shape[-1]
    neg_inf = mx.array(-float("inf"), dtype=mx.float32)
    scores = scores / mx.array([o.temperature for o in options], dtype=mx.float32)[:, None]
    ks = [o.top_k if 0 < o.top_k < vocab else 0 for o in options]
    if any(ks):
        k_max = max(ks)
        top = mx.sort(mx.topk(scores, k_max, axis=-1), axis=-1)  # ascending: the k-th largest at k_max - k
        kth = mx.take_along_axis(top, mx.array([[k_max - max(k, 1)] for k in ks], dtype=mx.int32), axis=-1)
        kth = mx.where(mx.array(ks)[:, None] > 0, kth, neg_inf)
        scores = mx.where(scores < kth, neg_inf, scores)
    if any(o.min_p > 0 for o in options):
        floor = mx.log(mx.array([o.min_p for o in options], dtype=mx.float32))[:, None]
        scores = mx.where(scores - scores.max(axis=-1, keepdims=True) < floor, neg_inf, scores)
    if any(o.top_p < 1.0 for o in options):
        probs = mx.softmax(scores, axis=-1)
        ordered = -mx.sort(-probs, axis=-1)
        before = mx.cumsum(ordered, axis=-1) - ordered
        top_p = mx.array([o.top_p for o in options], dtype=mx.float32)[:, None]
        kept = mx.sum(before < top_p, axis=-1, keepdims=True)
        threshold = mx.take_along_axis(ordered, mx.maximum(kept - 1, 0), axis=-1)
        threshold = mx.where(top_p < 1.0, threshold, 0.0)  # rows without top-p keep every id
        scores = mx.where(probs < threshold, neg_inf, scores)
    return scores


def _draw(scores: mx.array, uniforms: mx.array) -> mx.array:
    """One id per row, the softmax CDF inverted at ``uniforms`` [n]; -inf ids never drawn."""
    weights = mx.exp(scores - scores.max(axis=-1, keepdims=True))
    cdf = mx.cumsum(weights, axis=-1)
    target = uniforms[:, None] * cdf[:, -1:]
    index = mx.sum(cdf < target, axis=-1)
    return mx.minimum(index, scores.shape[-1] - 1).astype(mx.int32)
