"""Counters of one model's structured output, read by the metrics at scrape time.

The event loop counts requests and compile outcomes, the engine thread the time
spent on masks; each counter has one writer, and readers only ever see a value
that was current at some moment.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class GrammarStats:
    requests: Counter[str] = field(default_factory=Counter)  # constrained requests accepted, by format
    rejected: int = 0  # formats refused (invalid, too large, too slow to compile)
    mask_seconds: float = 0.0  # engine thread: filling and expanding token masks
    masked_tokens: int = 0  # sample sites a mask was applied to

    def masked(self, seconds: float, sites: int) -> None:
        self.mask_seconds += seconds
        self.masked_tokens += sites
