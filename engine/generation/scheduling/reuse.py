"""The scheduler's side of the prefix cache (see docs/ARCHITECTURE.md). A failure while
storing drops the entry, never the request."""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from ...caches.prefix import PrefixCache
from ..sequence.state import SequenceState

log = logging.getLogger("engine.generation.scheduling.reuse")


class PrefixReuse:
    def __init__(self, cache: PrefixCache | None, namespace: str):
        self.cache = cache
        self.namespace = namespace

    def _namespace(self, seq: SequenceState) -> str:
        """KV is shared only within one tenant namespace and one adapter (or none)."""
        return f"{self.namespace}\x1f{seq.tenant.namespace}\x1f{seq.adapter}"

    def applies(self, seq: SequenceState) -> bool:
        return self.cache is not None and seq.prefix.enabled

    def take(self, seq: SequenceState, min_tokens: int = 1) -> tuple[int, list[Any] | None]:
        """(cached tokens, owned caches), or (0, None) on a miss or a hit under ``min_tokens``."""
        if not self.applies(seq):
            return 0, None
        hit = self.cache.take(seq.prompt, self._namespace(seq), min_tokens)
        return (len(hit.tokens), hit.caches) if hit is not None else (0, None)

    def store(self, seq: SequenceState, tokens: Sequence[int], caches: list[Any] | Callable[[], list[Any]]) -> None:
        """``caches`` (or a function making them) cover exactly ``tokens``."""
        if not self.applies(seq) or len(tokens) <= seq.cached:
            return
        try:
            caches = caches() if callable(caches) else caches
            self.cache.put(tokens, caches, self._namespace(seq))
        except Exception:  # noqa: BLE001 - a cache entry is never worth a request
            log.warning("dropped a prefix cache entry of %d tokens", len(tokens), exc_info=True)

    def flush(self) -> int:
        """Drops every entry; returns how many there were."""
        if self.cache is None:
            return 0
        entries = len(self.cache)
        self.cache.clear()
        return entries
