"""The scheduler's side of the prefix cache (see docs/ARCHITECTURE.md). A failure while
storing drops the entry, never the request. A request asking for prompt logprobs takes no
entry (a cached prefix holds KV, not the scores it needs) but still publishes its own."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from ....caches.prefix import PrefixCache, PrefixFigures
from ....serving.protocol import Control
from ..sequence.state import SequenceState

if TYPE_CHECKING:
    from ....caches.disk_format import HostEntry

log = logging.getLogger("engine.generation.core.scheduling.reuse")


def namespace_of(model: str, tenant_namespace: str, adapter: str) -> str:
    """KV is shared only within one tenant namespace and one adapter (or none)."""
    return f"{model}\x1f{tenant_namespace}\x1f{adapter}"


def disk_namespace(namespace: str, digest_of: Callable[[str], str]) -> str | None:
    """The namespace an entry has on disk, where it outlives this process: an adapter is
    named by its content digest (its key is per load, its name may come back with other
    weights); None keeps the entry in memory only (an adapter read without a digest)."""
    model, tenant, adapter = namespace.split("\x1f")
    if not adapter:
        return namespace
    digest = digest_of(adapter)
    return f"{model}\x1f{tenant}\x1fsha256:{digest}" if digest else None


def session_of(tenant: str, session_id: str) -> str:
    """Session ids are the tenant's own (by name: tenants sharing a cache namespace keep their sessions apart)."""
    return f"{tenant}\x1f{session_id}" if session_id else ""


class PrefixReuse:
    def __init__(self, cache: PrefixCache | None, namespace: str):
        self.cache = cache
        self.namespace = namespace

    def _namespace(self, seq: SequenceState) -> str:
        return namespace_of(self.namespace, seq.tenant.namespace, seq.adapter)

    def applies(self, seq: SequenceState) -> bool:
        return self.cache is not None and seq.prefix.enabled

    def takes(self, seq: SequenceState) -> bool:
        """``seq`` may start from a cached prefix."""
        return self.applies(seq) and seq.prompt_logprobs is None

    @staticmethod
    def key(seq: SequenceState, tokens: Sequence[int]) -> Sequence[int]:
        """What the cache keys ``tokens`` of ``seq`` by: the tokens, with an image prompt's
        image positions standing for the images they hold (engine.vision.splice)."""
        return seq.images.key(tokens) if seq.images is not None else tokens

    def read_ahead(self, seq: SequenceState, min_tokens: int = 1) -> Future | None:
        """A read of the disk tier's entry for ``seq`` started on the tier's reader thread, when
        that entry covers more than memory; its result goes to ``take``."""
        cache = self.cache
        if not self.takes(seq) or cache is None or cache.disk is None:  # takes(): a cache
            return None
        entry = cache.disk_candidate(self.key(seq, seq.prompt), self._namespace(seq), min_tokens)
        return cache.disk.read_async(entry) if entry is not None else None

    def take(self, seq: SequenceState, min_tokens: int = 1, read=None) -> tuple[int, list[Any] | None]:
        """(cached tokens, owned caches), or (0, None) on a miss or a hit under ``min_tokens``."""
        cache = self.cache
        if not self.takes(seq) or cache is None:  # takes(): a cache
            return 0, None
        hit = cache.take(self.key(seq, seq.prompt), self._namespace(seq), min_tokens,
                              session_of(seq.tenant.name, seq.prefix.session), read)
        return (len(hit.tokens), hit.caches) if hit is not None else (0, None)

    def store(self, seq: SequenceState, tokens: Sequence[int], caches: list[Any] | Callable[[], list[Any]]) -> None:
        """``caches`` (or a function making them) cover exactly ``tokens``."""
        cache = self.cache
        if not self.applies(seq) or cache is None or len(tokens) <= seq.cached:  # applies(): a cache
            return
        try:
            caches = caches() if callable(caches) else caches
            cache.put(self.key(seq, tokens), caches, self._namespace(seq),
                           session_of(seq.tenant.name, seq.prefix.session))
        except Exception:  # a cache entry is never worth a request
            log.warning("dropped a prefix cache entry of %d tokens", len(tokens), exc_info=True)

    def peek(self, tokens, namespace: str, session: str) -> int:
        """Prompt tokens the memory tier covers (0 with the cache off); touches the session."""
        if self.cache is None:
            return 0
        self.cache.sessions.touch(session)
        return self.cache.covered(tokens, namespace)

    def install(self, entry: HostEntry, namespace: str, session: str) -> int:
        return self.cache.install(entry, namespace, session) if self.cache is not None else 0

    def close_session(self, session: str) -> int:
        return self.cache.close_session(session) if self.cache is not None else 0

    def persist(self) -> None:
        """Queues every memory entry the disk tier lacks (a clean shutdown); never raises."""
        if self.cache is None or self.cache.disk is None:
            return
        try:
            self.cache.persist()
        except Exception:  # shutting down: entries are a bonus
            log.warning("could not queue the prefix cache for the disk tier", exc_info=True)

    def figures(self) -> PrefixFigures:
        return self.cache.figures() if self.cache is not None else PrefixFigures()

    def flush(self) -> int:
        """Drops every entry; returns how many there were."""
        if self.cache is None:
            return 0
        entries = len(self.cache)
        self.cache.clear()
        return entries


class Reuses(Protocol):
    """An engine thread's scheduler, as the prefix cache's controls read it."""

    @property
    def reuse(self) -> PrefixReuse: ...


@dataclass(frozen=True)
class FlushPrefixCache(Control[Reuses, int]):
    """Drops every prefix-cache entry (running requests keep their own caches); answers how many."""

    def answer(self, scheduler: Reuses) -> int:
        return scheduler.reuse.flush()


@dataclass(frozen=True)
class PeekPrefix(Control[Reuses, int]):
    """Answers the prompt tokens the memory tier covers now (a prefetch's first look); touches the session."""

    tokens: tuple[int, ...]
    namespace: str
    session: str

    def answer(self, scheduler: Reuses) -> int:
        return scheduler.reuse.peek(self.tokens, self.namespace, self.session)


@dataclass(frozen=True)
class InstallPrefix(Control[Reuses, int]):
    """Puts an entry read from the disk tier (off the thread) into memory; answers its tokens."""

    entry: HostEntry
    namespace: str  # the memory tier's (the entry's own is the disk tier's)
    session: str

    def answer(self, scheduler: Reuses) -> int:
        return scheduler.reuse.install(self.entry, self.namespace, self.session)


@dataclass(frozen=True)
class CloseSession(Control[Reuses, int]):
    """Ends a session's affinity; answers how many entries it held."""

    session: str

    def answer(self, scheduler: Reuses) -> int:
        return scheduler.reuse.close_session(self.session)
