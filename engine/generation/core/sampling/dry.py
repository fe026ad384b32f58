"""DRY ("Don't Repeat Yourself"), as llama.cpp's dry sampler: a token that would extend a
repetition of earlier context by more than ``allowed_length`` tokens loses
``multiplier * base ** (length - allowed_length)`` from its score.

Invariants: a function of the token history alone (prompt, output and any drafts counted
as emitted), so speculation's verification sites see what a plain step would; the search
stops at the nearest sequence breaker from the end (breakers are token sequences, keyed
here by their first token); a token that is itself a one-token breaker is never penalized.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from ....requests import DryOptions
from ....validation import MAX_DRY_WINDOW

Breakers = Mapping[int, tuple[tuple[int, ...], ...]]  # first token -> the tails after it
MAX_WINDOW = MAX_DRY_WINDOW  # the most recent tokens searched (penalty_last_n 0 asks for this many)
_FLOAT_MAX_LOG = 88.7228391  # log of float32's largest value: the exponent's clamp


def breakers_by_head(sequences: Sequence[Sequence[int]]) -> dict[int, tuple[tuple[int, ...], ...]]:
    out: dict[int, tuple[tuple[int, ...], ...]] = {}
    for seq in sequences:
        if seq and tuple(seq[1:]) not in out.get(seq[0], ()):
            out[seq[0]] = out.get(seq[0], ()) + (tuple(seq[1:]),)
    return out


def penalties(tokens: Sequence[int], o: DryOptions, breakers: Breakers) -> dict[int, float]:
    """Token id -> the amount subtracted from its score, given the history ``tokens``."""
    n = min(len(tokens), o.penalty_last_n or MAX_WINDOW)
    if o.multiplier == 0 or n <= o.allowed_length:
        return {}
    rev = list(tokens[len(tokens) - n:])[::-1]  # rev[i]: the token i places from the end
    limit = _repeat_limit(rev, breakers)
    if limit < o.allowed_length:
        return {}
    longest: dict[int, int] = {}
    for k, length in _suffix_matches(rev, limit).items():  # rev[k - 1] follows the repeat ending at k
        if length >= o.allowed_length and longest.get(rev[k - 1], -1) < length:
            longest[rev[k - 1]] = length
    cap = int(_FLOAT_MAX_LOG / math.log(o.base)) if o.base > 1.000001 else 0
    out = {}
    for token, length in longest.items():
        if () in breakers.get(token, ()):
            continue
        exponent = length - o.allowed_length
        if cap > 0:
            exponent = min(exponent, cap)
        out[token] = o.multiplier * o.base ** exponent
    return out


def _repeat_limit(rev: Sequence[int], breakers: Breakers) -> int:
    """How far back a repetition may reach: up to the nearest complete breaker."""
    if not breakers:
        return len(rev)
    for i, token in enumerate(rev):
        tails = breakers.get(token)
        if tails is None:
            continue
        longest = -1
        for tail in tails:
            size = len(tail)
            if longest < size <= i and all(tail[k] == rev[i - k - 1] for k in range(size)):
                longest = size
        if longest >= 0:
            return i - longest
    return len(rev)


def _suffix_matches(rev: list[int], limit: int) -> dict[int, int]:
    """k -> how many tokens from ``k`` places before the end on repeat the context's last
    ones (at most ``limit``): the Z-algorithm over the reversed context, visiting only the
    places whose token is the last token (every other place repeats nothing)."""
    n, head = len(rev), rev[0]
    z: dict[int, int] = {}
    lt = rt = k = 0
    while True:
        try:
            k = rev.index(head, k + 1)
        except ValueError:
            return z
        if k > rt:
            m = 0
            while m + k < n and rev[m] == rev[m + k]:
                m += 1
            z[k] = min(m, limit)
            lt, rt = k, k + m - 1
        elif (zp := z.get(k - lt, 0)) < rt - k + 1:  # inside the box: its pair's value holds
            z[k] = min(zp, limit)
        else:
            i = rt + 1
            while i < n and rev[i] == rev[i - k]:
                i += 1
            z[k] = min(i - k, limit)
            lt, rt = k, i - 1
