"""Token-prefix reuse across requests (mlx-lm's ``LRUPromptCache``), bounded by bytes held.

Invariants: ``take`` returns caller-owned state leaving at least one token to compute;
``put`` moves ownership to the cache; namespaces separate incompatible state.
Engine thread only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, trim_prompt_cache

from .blocks import BlockLedger
from .exact import buffer_bytes, exact


@dataclass
class PrefixHit:
    """Owned state covering ``tokens`` (a prefix of the looked-up prompt)."""

    tokens: list[int]
    caches: list[Any]


class PrefixCache:
    def __init__(self, max_bytes: int, max_entries: int = 64, ledger: BlockLedger | None = None):
        self.max_bytes = max_bytes
        self.ledger = ledger  # told of every entry that comes and goes
        self._published: set[tuple[str, tuple[int, ...]]] = set()
        self._lru = LRUPromptCache(max_size=max_entries)  # bounded by entries there, by bytes here
        self._held: dict[tuple[str, tuple[int, ...]], int] = {}  # (namespace, tokens) -> bytes of its buffers
        self.hits = 0
        self.hit_tokens = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        """The bytes counted against ``max_bytes``."""
        return sum(self._held.values())

    def held_bytes(self) -> int:
        """The stored entries' bytes measured again (a check of ``nbytes``)."""
        return buffer_bytes([cache for entry in self.entries() for cache in entry])

    def entries(self) -> list[list[Any]]:
        """Every stored entry's caches (owned by the cache: read, never change)."""
        return [self._lru._trie.get(ns, tokens).prompt_cache for ns, tokens in self._keys()]

    def _keys(self) -> list[tuple[str, list[int]]]:
        """(namespace, tokens) of every entry (from mlx-lm's private fields)."""
        return [key for order in self._lru._lru._lrus.values() for key in order]

    def __len__(self) -> int:
        return len(self._lru)

    def take(self, prompt: Sequence[int], ns: str, min_tokens: int = 1) -> PrefixHit | None:
        """The longest cached prefix of ``prompt`` (never all of it), caller-owned; None under ``min_tokens``."""

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
        if caches is None or covered < max(min_tokens, 1):
            self.misses += 1
            return None
        self.hits += 1
        self.hit_tokens += covered
        return PrefixHit(tokens[:covered], caches)

    def put(self, tokens: Sequence[int], caches: list[Any], ns: str) -> None:
        """Stores ``caches`` (covering exactly ``tokens``); ownership moves to the cache."""
        if not tokens:
            return
        stored = exact(caches)
        self._lru.insert_cache(ns, list(tokens), stored)  # may drop entries it covers, or the oldest
        self._held[(ns, tuple(tokens))] = buffer_bytes(stored)
        self._forget_dropped()
        while self._held and self.nbytes > self.max_bytes:
            self._lru.trim_to(n_sequences=len(self._lru) - 1)  # the least recently used
            self._forget_dropped()
        self._publish()

    def clear(self) -> None:
        self._lru.trim_to(n_sequences=0)
        self._held.clear()
        self._published = set()
        if self.ledger is not None:
            self.ledger.cleared()

    def _publish(self) -> None:
        if self.ledger is None:
            return
        now = set(self._held)  # the entries' keys (the same tuple objects: cheap to compare)
        added, removed = now - self._published, self._published - now
        if added or removed:
            self.ledger.entries_changed(added, removed)
            self._published = now

    def _forget_dropped(self) -> None:
        if len(self._held) != len(self._lru):
            stored = {(ns, tuple(tokens)) for ns, tokens in self._keys()}
            self._held = {key: n for key, n in self._held.items() if key in stored}
