"""Choosing tokens for a whole batch at once. A seeded draw depends only on (seed,
step): a request yields the same tokens alone or inside any batch.

Invariants: processors (bias, penalties, DRY, bad words, allowed ids) act on each row
from its own history; the truncating samplers run per row with its own parameters
(``truncation``); XTC's draw is a second stream of (seed, step), apart from the token
draw; mirostat's ``mu`` changes only when a token is committed.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Protocol, Sequence

import mlx.core as mx
import numpy as np

from ....mlx_typed import float_list
from ....requests import SamplerOrder, SamplingOptions
from . import dry, mirostat
from .truncation import temperature, truncate
from .words import SamplingTokens, banned

_MASK = 0xFFFFFFFFFFFFFFFF
_XTC_STREAM = 0x5851F42D4C957F2D  # mixed into the seed for XTC's draws


def draw_uniform(seed: int, step: int) -> float:
    """The uniform in (0, 1) of draw ``step`` under ``seed`` (splitmix64)."""
    z = (seed * 0x9E3779B97F4A7C15 + (step + 1) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    return ((z >> 11) + 0.5) / float(1 << 53)


def xtc_uniform(seed: int, step: int) -> float:
    """XTC's chance at ``step``: a stream of its own, a function of (seed, step) only."""
    return draw_uniform((seed ^ _XTC_STREAM) & _MASK, step)


class SamplingState:
    """One sequence's options, seed and processor history; engine thread only. ``tokens``
    holds the request's texts already tokenized (bad words, DRY's breakers)."""

    def __init__(self, options: SamplingOptions, prompt: Sequence[int], tokens: SamplingTokens = SamplingTokens()):
        self.options = options
        self.seed = options.seed if options.seed is not None else random.getrandbits(63)
        self._window = max(options.repetition_context_size, 1)
        self._recent = list(prompt[-self._window:])
        self._counts: Counter[int] = Counter()
        self._bias: tuple[mx.array, mx.array] | None = None  # built on the engine thread
        self._words = tokens.bad_words
        self._output: list[int] = []
        d = options.dry
        self._dry = d if d is not None and d.multiplier > 0 else None
        self._breakers = dry.breakers_by_head(tokens.breakers)
        self._dry_window = (d.penalty_last_n or dry.MAX_WINDOW) if d is not None else 0
        self._context = list(prompt[-self._dry_window:]) if self._dry else []
        self._allowed: mx.array | None = None  # [V] bool, built on the engine thread
        self.mu = mirostat.initial_mu(options.mirostat) if options.mirostat is not None else 0.0
        self._surprises: dict[int, tuple[_Surprises, int]] = {}  # step -> its chosen token's surprise

    @property
    def has_processors(self) -> bool:
        o = self.options
        return (bool(o.logit_bias) or o.repetition_penalty != 1.0 or bool(o.presence_penalty or o.frequency_penalty)
                or self._dry is not None or bool(self._words) or bool(o.allowed_token_ids))

    @property
    def greedy(self) -> bool:
        return self.options.temperature == 0.0

    def commit(self, token: int) -> None:
        step = len(self._output)
        self._counts[token] += 1
        self._recent.append(token)
        if len(self._recent) > self._window:
            del self._recent[: len(self._recent) - self._window]
        self._output.append(token)
        if self._dry is not None:
            self._context.append(token)
            if self._dry_window and len(self._context) > 2 * self._dry_window:
                del self._context[: len(self._context) - self._dry_window]
        pending = self._surprises.pop(step, None)
        if pending is not None:
            assert self.options.mirostat is not None  # chose() is called for mirostat rows only
            self.mu = mirostat.updated_mu(self.mu, self.options.mirostat, pending[0].at(pending[1]))
        self._surprises.clear()

    def chose(self, step: int, surprises: "_Surprises", row: int) -> None:
        """Mirostat: the surprise of the token chosen for ``step``, read when it is committed."""
        self._surprises[step] = (surprises, row)

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
        if self._dry is not None and (amounts := dry.penalties(self._context + list(extra), self._dry,
                                                                self._breakers)):
            scores = scores.at[mx.array(list(amounts), dtype=mx.int32)].subtract(
                mx.array(list(amounts.values()), dtype=mx.float32))
        if self._words and (words := banned(self._words, self._output + list(extra) if extra else self._output)):
            scores[mx.array(sorted(words), dtype=mx.int32)] = float("-inf")
        if o.allowed_token_ids:
            if self._allowed is None:
                allowed = np.zeros(scores.shape[-1], dtype=bool)
                allowed[list(o.allowed_token_ids)] = True
                self._allowed = mx.array(allowed)
            scores = mx.where(self._allowed, scores, float("-inf"))
        return scores


class _Surprises:
    """One batch's surprises of the chosen tokens [m], evaluated with them; read once."""

    def __init__(self, values: mx.array):
        self._array = values
        self._values: list[float] | None = None

    def at(self, row: int) -> float:
        if self._values is None:
            self._values = float_list(self._array)
        return self._values[row]


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
    chosen[index] = _sample(scores[index], [states[i] for i in sampled], [steps[i] for i in sampled])
    return chosen


def _sample(scores: mx.array, states: Sequence[SamplingState], steps: Sequence[int]) -> mx.array:
    """Draws for sampled rows: each group (default order, llama.cpp's order, mirostat)
    truncated on its own rows, then one inverse-CDF draw per row."""
    options = [s.options for s in states]
    uniforms = mx.array([draw_uniform(s.seed, t) for s, t in zip(states, steps)], dtype=mx.float32)
    xtc = [xtc_uniform(s.seed, t) if s.options.xtc is not None else 1.0 for s, t in zip(states, steps)]
    groups: dict[object, list[int]] = {}
    for i, o in enumerate(options):
        groups.setdefault("mirostat" if o.mirostat is not None else o.order, []).append(i)
    if len(groups) == 1 and SamplerOrder.DEFAULT in groups:
        return _draw(truncate(scores, options, xtc), uniforms)
    parts, miro = [], None
    for key, rows in groups.items():  # each group on its own rows only
        index, part = mx.array(rows, dtype=mx.int32), [options[i] for i in rows]
        if key == "mirostat":
            kept, log2p = mirostat.truncate(temperature(scores[index], part), [states[i].mu for i in rows])
            parts.append((index, kept))
            miro = (rows, index, log2p)
        else:
            parts.append((index, truncate(scores[index], part, [xtc[i] for i in rows])))
    for index, kept_scores in parts:
        scores[index] = kept_scores
    drawn = _draw(scores, uniforms)
    if miro is not None:
        rows, index, log2p = miro
        surprise = -mx.take_along_axis(log2p, drawn[index][:, None], axis=-1)[:, 0]
        (drawn,) = mx.depends([drawn], [surprise])  # evaluated with the choice, read at commit
        holder = _Surprises(surprise)
        for j, i in enumerate(rows):
            states[i].chose(steps[i], holder, j)
    return drawn


def _mask(scores: mx.array, options: Sequence[SamplingOptions]) -> mx.array:
    """Temperature, then top-k, min-p, top-p (and the newer samplers where set), each on
    what the previous left: the default order."""
    return truncate(scores, options, [1.0] * len(options))


def _draw(scores: mx.array, uniforms: mx.array) -> mx.array:
    """One id per row, the softmax CDF inverted at ``uniforms`` [n]; -inf ids never drawn."""
    weights = mx.exp(scores - scores.max(axis=-1, keepdims=True))
    cdf = mx.cumsum(weights, axis=-1)
    target = uniforms[:, None] * cdf[:, -1:]
    index = mx.sum(cdf < target, axis=-1)
    return mx.minimum(index, scores.shape[-1] - 1).astype(mx.int32)
