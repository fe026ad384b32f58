"""The scheduler's side of the prefix cache: take at start, store at three moments.

A sequence takes the longest cached prefix of its prompt when it starts (its prefill
begins after it). Its state is stored when a chat's history boundary is reached during
prefill (a copy), when it joins the batch (its own prefill caches, handed over: the
batch holds a copy), and when it finishes normally (its KV extracted from the batch:
prompt plus output, ready for the next turn). Keys are the tokens actually computed,
so recurrent state is stored only where it is exact. State that covers no more than
the sequence took from the cache is not stored again: until the sequence writes to
it, it shares the buffers of the entry it came from, which already serves the same
prompts (a second entry would count those buffers twice). Each adapter (each load
of one) has a namespace of its own. A failure while storing drops that entry and
never the request.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence as Seq

from ...caches.prefix import PrefixCache
from ..sequence.state import Sequence

log = logging.getLogger("engine.generation.scheduling.reuse")


class PrefixReuse:
    def __init__(self, cache: PrefixCache | None, namespace: str):
        self.cache = cache
        self.namespace = namespace

    def _namespace(self, seq: Sequence) -> str:
        """KV is shared only within one tenant namespace and one adapter (or none)."""
        return f"{self.namespace}\x1f{seq.tenant.namespace}\x1f{seq.adapter}"

    def applies(self, seq: Sequence) -> bool:
        return self.cache is not None and seq.reuse.enabled

    def take(self, seq: Sequence, min_tokens: int = 1) -> tuple[int, list[Any] | None]:
        """Cached tokens and the owned caches covering them, or (0, None) on a miss (or a
        hit shorter than ``min_tokens``)."""
        if not self.applies(seq):
            return 0, None
        hit = self.cache.take(seq.prompt, self._namespace(seq), min_tokens)
        return (len(hit.tokens), hit.caches) if hit is not None else (0, None)

    def store(self, seq: Sequence, tokens: Seq[int], caches: list[Any] | Callable[[], list[Any]]) -> None:
        """Hands ``caches`` (covering exactly ``tokens``; or a function making them) to
        the cache."""
        if not self.applies(seq) or len(tokens) <= seq.cached:
            return
        try:
            caches = caches() if callable(caches) else caches
            self.cache.put(tokens, caches, self._namespace(seq))
        except Exception:  # noqa: BLE001 - a cache entry is never worth a request
            log.warning("dropped a prefix cache entry of %d tokens", len(tokens), exc_info=True)
