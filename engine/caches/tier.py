"""Where a prefetched prefix came from (plain data: the service layer reads it)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Tier(enum.Enum):
    NONE = "none"
    MEMORY = "memory"
    DISK = "disk"


@dataclass(frozen=True)
class Prefetched:
    prompt_tokens: int
    cached_tokens: int  # what a request of this prompt now takes from memory
    tier: Tier
