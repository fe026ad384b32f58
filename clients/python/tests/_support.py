"""Shared test data and helpers."""

from __future__ import annotations

import math

SIMILAR = ("A man is eating food.", "A man is eating a piece of bread.")
UNRELATED = "The stock market crashed today."


def cosine(a, b) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))
