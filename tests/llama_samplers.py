"""A plain reference of llama.cpp's samplers (src/llama-sampling.cpp), written from its source
for the oracle tests: candidates are (id, logit) lists that samplers shorten, as llama.cpp's
``llama_token_data_array`` is, in float64 and loops rather than batched arrays.

One deliberate difference: where llama.cpp leaves ids it removed in the array at -inf
(top-n-sigma), they are dropped here, which is the same distribution; the engine treats
removed ids as absent everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Candidates:
    ids: list[int]
    logits: list[float]
    p: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, row) -> "Candidates":
        row = np.asarray(row, dtype=np.float64)
        keep = np.flatnonzero(np.isfinite(row))
        return cls(keep.tolist(), row[keep].tolist())

    def sort(self) -> None:
        order = sorted(range(len(self.ids)), key=lambda i: -self.logits[i])
        self.ids = [self.ids[i] for i in order]
        self.logits = [self.logits[i] for i in order]
        if self.p:
            self.p = [self.p[i] for i in order]

    def keep(self, indices) -> None:
        indices = list(indices)
        self.ids = [self.ids[i] for i in indices]
        self.logits = [self.logits[i] for i in indices]
        self.p = [self.p[i] for i in indices] if self.p else []

    def softmax(self, sort: bool = True) -> None:
        if sort:
            self.sort()
        top = max(self.logits)
        e = [math.exp(x - top) for x in self.logits]
        total = sum(e)
        self.p = [x / total for x in e]

    def distribution(self) -> dict[int, float]:
        """id -> probability of what is left (temperature as applied)."""
        self.softmax(sort=False)
        return dict(zip(self.ids, self.p))


def temp(c: Candidates, t: float) -> None:
    if t <= 0:
        best = max(range(len(c.ids)), key=lambda i: c.logits[i])
        c.keep([best])
        return
    c.logits = [x / t for x in c.logits]


def temp_ext(c: Candidates, t: float, delta: float, exponent: float) -> None:
    if delta <= 0:
        temp(c, t)
        return
    low, high = max(0.0, t - delta), t + delta
    if len(c.ids) <= 1:
        return
    max_entropy = -math.log(1.0 / len(c.ids))
    c.softmax()
    entropy = -sum(p * math.log(p) for p in c.p if p > 0)
    dyn = low + (high - low) * (entropy / max_entropy) ** exponent
    temp(c, dyn)


def top_k(c: Candidates, k: int) -> None:
    if k <= 0:
        return
    c.sort()
    c.keep(range(min(k, len(c.ids))))


def top_p(c: Candidates, p: float) -> None:
    if p >= 1.0:
        return
    c.softmax()
    total, last = 0.0, len(c.ids)
    for i, q in enumerate(c.p):
        total += q
        if total >= p:
            last = i + 1
            break
    c.keep(range(last))


def min_p(c: Candidates, p: float) -> None:
    if p <= 0:
        return
    floor = max(c.logits) + math.log(p)
    c.keep(i for i, x in enumerate(c.logits) if x >= floor)


def typical(c: Candidates, p: float) -> None:
    if p >= 1.0:
        return
    c.softmax()
    entropy = -sum(q * math.log(q) for q in c.p)
    shifted = [abs(-math.log(q) - entropy) for q in c.p]
    order = sorted(range(len(c.ids)), key=lambda i: shifted[i])
    total, last = 0.0, len(order)
    for i, idx in enumerate(order):
        total += c.p[idx]
        if total > p:
            last = i + 1
            break
    c.keep(order[:last])


def top_n_sigma(c: Candidates, n: float) -> None:
    if n <= 0 or len(c.ids) <= 1:
        return
    top = max(c.logits)
    mean = sum(c.logits) / len(c.logits)
    std = math.sqrt(sum((x - mean) ** 2 for x in c.logits) / len(c.logits))
    c.keep(i for i, x in enumerate(c.logits) if not x < top - n * std)


def xtc(c: Candidates, probability: float, threshold: float, chance: float) -> None:
    if probability <= 0 or threshold > 0.5 or len(c.ids) < 2:
        return
    if chance > probability:
        return
    c.softmax()
    last = 0
    for i, q in enumerate(c.p):
        if q >= threshold:
            last = i
        else:
            break
    if last > 0:
        c.keep(range(last, len(c.ids)))


def mirostat_v2(c: Candidates, mu: float) -> None:
    """The truncation (the draw is the caller's); ``c.p`` is then the renormalized distribution."""
    c.softmax()
    end = next((i for i, q in enumerate(c.p) if -math.log2(q) > mu), len(c.p))
    c.keep(range(max(end, 1)))
    c.softmax()


def mirostat_mu(c: Candidates, mu: float, tau: float, eta: float, chosen: int) -> float:
    """mu after ``chosen`` (an id) is drawn from the truncated ``c``."""
    surprise = -math.log2(c.p[c.ids.index(chosen)])
    return mu - eta * (surprise - tau)


def llama_chain(c: Candidates, o, chance: float) -> None:
    """llama.cpp's default order: top_n_sigma, top_k, typical, top_p, min_p, xtc, temperature."""
    top_n_sigma(c, o.top_n_sigma)
    top_k(c, o.top_k)
    typical(c, o.typical_p)
    top_p(c, o.top_p)
    min_p(c, o.min_p)
    if o.xtc is not None:
        xtc(c, o.xtc.probability, o.xtc.threshold, chance)
    dyn = o.dynamic_temperature
    temp_ext(c, o.temperature, dyn.range if dyn else 0.0, dyn.exponent if dyn else 1.0)


def default_chain(c: Candidates, o, chance: float) -> None:
    """The engine's default order: temperature, top_k, min_p, top_p, typical, top_n_sigma, xtc."""
    dyn = o.dynamic_temperature
    temp_ext(c, o.temperature, dyn.range if dyn else 0.0, dyn.exponent if dyn else 1.0)
    top_k(c, o.top_k)
    min_p(c, o.min_p)
    top_p(c, o.top_p)
    typical(c, o.typical_p)
    top_n_sigma(c, o.top_n_sigma)
    if o.xtc is not None:
        xtc(c, o.xtc.probability, o.xtc.threshold, chance)


def dry(tokens: list[int], multiplier: float, base: float, allowed_length: int, last_n: int,
        breakers: list[list[int]]) -> dict[int, float]:
    """Penalties by id, written from the algorithm's definition rather than its Z-algorithm:
    the repeat ending at position j is the longest common suffix of tokens[:j+1] and the whole
    window, cut at the nearest breaker from the end; the token after it would extend it."""
    window = tokens[-last_n:] if last_n else list(tokens)
    n = len(window)
    if multiplier == 0 or n <= allowed_length:
        return {}
    limit = n
    for i in range(n):  # i places from the end: the nearest breaker whose tokens are all present
        head = window[n - 1 - i]
        matches = [len(b) - 1 for b in breakers if b[0] == head and len(b) - 1 <= i
                   and all(b[1 + k] == window[n - 1 - i + 1 + k] for k in range(len(b) - 1))]
        if matches:
            limit = i - max(matches)
            break
    if limit < allowed_length:
        return {}
    longest: dict[int, int] = {}
    for j in range(n - 1):
        length = 0
        while length <= j and window[j - length] == window[n - 1 - length]:
            length += 1
        length = min(length, limit)
        if length >= allowed_length:
            nxt = window[j + 1]
            longest[nxt] = max(longest.get(nxt, 0), length)
    single = {b[0] for b in breakers if len(b) == 1}
    cap = int(88.7228391 / math.log(base)) if base > 1.000001 else 0
    return {t: multiplier * base ** (min(n_ - allowed_length, cap) if cap > 0 else n_ - allowed_length)
            for t, n_ in longest.items() if t not in single}
