"""Per-request sampling inside a batch: score processors, selection and logprobs.

A ``RowSampler`` owns one request's processor history. Seeded draws are keyed by
(seed, step), never by a shared random stream, so a request with a seed yields the
same tokens alone or inside any batch, whatever its neighbours do.
Greedy rows without processors take the batched fast path in ``greedy_tokens``.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Sequence

import mlx.core as mx

from ..events import TokenLogprob, TopLogprob
from ..requests import SamplingOptions

_MASK = 0xFFFFFFFFFFFFFFFF


def draw_key(seed: int, step: int) -> mx.array:
    """The PRNG key of draw ``step`` of a request seeded with ``seed`` (splitmix64 mix)."""
    z = (seed * 0x9E3779B97F4A7C15 + (step + 1) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return mx.random.key((z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFF)


def greedy_tokens(logits: mx.array) -> mx.array:
    """Argmax over the last axis: the batched fast path for plain greedy rows."""
    return mx.argmax(logits, axis=-1)


class RowSampler:
    """Selects one request's tokens. Not thread-safe; lives on the engine thread."""

    def __init__(self, options: SamplingOptions, prompt: Sequence[int]):
        self.options = options
        self.seed = options.seed if options.seed is not None else random.getrandbits(63)
        self._recent = list(prompt[-max(options.repetition_context_size, 1):])
        self._counts: Counter[int] = Counter()
        bias = options.logit_bias
        self._bias_ids = mx.array(list(bias.keys()), dtype=mx.int32) if bias else None
        self._bias_values = mx.array(list(bias.values()), dtype=mx.float32) if bias else None

    @property
    def is_plain_greedy(self) -> bool:
        return self.options.is_greedy

    def commit(self, token: int) -> None:
        """Advance processor history with the token actually emitted."""
        self._counts[token] += 1
        self._recent.append(token)
        window = max(self.options.repetition_context_size, 1)
        if len(self._recent) > window:
            del self._recent[: len(self._recent) - window]

    def process(self, logits: mx.array) -> mx.array:
        """Applies logit bias and penalties to one row of scores [V]."""
        o = self.options
        logits = logits.astype(mx.float32)
        if self._bias_ids is not None:
            logits = logits.at[self._bias_ids].add(self._bias_values)
        if o.repetition_penalty != 1.0 and self._recent:
            ids = mx.array(sorted(set(self._recent)), dtype=mx.int32)
            picked = logits[ids]
            picked = mx.where(picked < 0, picked * o.repetition_penalty, picked / o.repetition_penalty)
            logits[ids] = picked
        if (o.presence_penalty or o.frequency_penalty) and self._counts:
            ids = mx.array(list(self._counts.keys()), dtype=mx.int32)
            counts = mx.array(list(self._counts.values()), dtype=mx.float32)
            logits = logits.at[ids].subtract(o.presence_penalty + o.frequency_penalty * counts)
        return logits

    def select(self, logits: mx.array, step: int) -> mx.array:
        """Chooses the token at ``step`` from one row of scores [V] (a 0-d array)."""
        o = self.options
        scores = self.process(logits) if not self.is_plain_greedy else logits
        if o.temperature == 0.0:
            return mx.argmax(scores)
        scores = _filter(scores / o.temperature, o)
        return mx.random.categorical(scores, key=draw_key(self.seed, step))


def _filter(scores: mx.array, o: SamplingOptions) -> mx.array:
    """Top-k, min-p and top-p filtering of temperature-scaled scores [V]."""
    neg_inf = mx.array(-float("inf"), dtype=scores.dtype)
    if 0 < o.top_k < scores.shape[-1]:
        kth = mx.topk(scores, o.top_k).min()
        scores = mx.where(scores < kth, neg_inf, scores)
    if o.min_p > 0.0:
        probs = mx.softmax(scores)
        scores = mx.where(probs < o.min_p * probs.max(), neg_inf, scores)
    if o.top_p < 1.0:
        probs = mx.softmax(scores)
        ordered = mx.sort(probs)[::-1]
        before = mx.cumsum(ordered) - ordered
        kept = mx.sum(before < o.top_p)
        threshold = ordered[mx.maximum(kept - 1, 0)]
        scores = mx.where(probs < threshold, neg_inf, scores)
    return scores


def token_logprobs(
    logits: mx.array, token: int, top_n: int, token_text
) -> TokenLogprob:
    """Log probability of ``token`` under the unmodified distribution of one row
    [V], with the ``top_n`` most likely alternatives, most likely first."""
    logprobs = logits.astype(mx.float32) - mx.logsumexp(logits.astype(mx.float32))
    top: tuple[TopLogprob, ...] = ()
    if top_n > 0:
        ids = mx.argpartition(-logprobs, top_n - 1)[:top_n]
        values = logprobs[ids]
        order = mx.argsort(-values)
        ids, values = ids[order].tolist(), values[order].tolist()
        top = tuple(TopLogprob(i, v, token_text(i)) for i, v in zip(ids, values))
    return TokenLogprob(token, logprobs[token].item(), top)
