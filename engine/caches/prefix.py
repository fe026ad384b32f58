"""Token-prefix reuse across requests, with the seed's ownership rules.

Built on mlx-lm's ``LRUPromptCache`` (a trie over processed tokens, LRU bounded by
bytes and entry count, three kinds of hit: exact, a shorter stored prefix, or a
longer stored entry trimmed back). On top of it:

* ``take`` returns state the caller owns (a deep copy; the stored entry stays),
  covering at most ``len(prompt) - 1`` tokens so at least one token is always left
  to compute (a longer stored entry is trimmed to the common prefix, less one), or
  None on a miss;
* ``put`` transfers ownership of the caches to storage, even when storage evicts
  them at once; if it raises, ownership stays with the caller;
* the namespace separates incompatible state (model, adapter).

Nothing here is kept per client or per session: the only state is the bounded
trie of entries, so no client-chosen string can grow the cache's memory.

Used only on the engine thread (not thread-safe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, trim_prompt_cache


@dataclass
class PrefixHit:
    """Owned state covering ``tokens`` (a prefix of the looked-up prompt)."""

    tokens: list[int]
    caches: list[Any]


class PrefixCache:
    def __init__(self, max_bytes: int, max_entries: int = 64):
        self._lru = LRUPromptCache(max_size=max_entries, max_bytes=max_bytes)
        self.hits = 0
        self.hit_tokens = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._lru.nbytes

    def __len__(self) -> int:
        return len(self._lru)

    def take(self, prompt: Sequence[int], ns: str) -> PrefixHit | None:
        """The longest usable cached prefix of ``prompt`` (never all of it), owned by the caller."""
        tokens = list(prompt)
        if len(tokens) < 2:
            return None
        caches, rest = self._lru.fetch_nearest_cache(ns, tokens)
        if caches is not None and not rest:  # exact: give back all but the last token
            if can_trim_prompt_cache(caches):
                trim_prompt_cache(caches, 1)
                rest = tokens[-1:]
            else:
                tokens = tokens[:-1]
                caches, rest = self._lru.fetch_nearest_cache(ns, tokens)
        covered = len(tokens) - len(rest)
        if caches is None or covered <= 0:
            self.misses += 1
            return None
        self.hits += 1
        self.hit_tokens += covered
        return PrefixHit(tokens[:covered], caches)

    def put(self, tokens: Sequence[int], caches: list[Any], ns: str) -> None:
        """Stores ``caches`` (covering exactly ``tokens``); ownership moves to the cache."""
        if tokens:
            self._lru.insert_cache(ns, list(tokens), caches)

    def clear(self) -> None:
        self._lru.trim_to(n_sequences=0)
