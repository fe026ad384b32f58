"""Token-prefix reuse across requests: a memory tier (mlx-lm's ``LRUPromptCache``, bounded
by bytes held and entries) over an optional disk tier (``DiskTier``).

Invariants: ``take`` returns caller-owned state leaving at least one token to compute;
``put`` moves ownership to the cache; namespaces separate incompatible state; eviction
takes the least recently stored entry outside open sessions first, and spills it to disk
when the disk tier keeps only evicted entries. ``nbytes`` counts memory only. Engine thread only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, trim_prompt_cache

from .blocks import BlockLedger
from .disk import DiskEntry, DiskStats, DiskTier
from .disk_format import HostEntry, from_host, to_host
from .exact import buffer_bytes, exact
from .sessions import Sessions

Key = tuple[str, tuple[int, ...]]  # (namespace, tokens)
NO_DISK = DiskStats(0, 0, 0, 0, 0, 0, 0)


@dataclass(frozen=True)
class PrefixFigures:
    """What the load reports say of a prefix cache (all zeros with none)."""

    entries: int = 0
    nbytes: int = 0
    hits: int = 0
    misses: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    disk: DiskStats = NO_DISK
    open_sessions: int = 0


@dataclass
class PrefixHit:
    """Owned state covering ``tokens`` (a prefix of the looked-up prompt)."""

    tokens: list[int]
    caches: list[Any]
    tier: str = "memory"  # or "disk"


class PrefixCache:
    def __init__(self, max_bytes: int, max_entries: int = 64, ledger: BlockLedger | None = None, *,
                 disk: DiskTier | None = None, spill_all: bool = True, sessions: Sessions | None = None,
                 disk_namespace: Callable[[str], str | None] = lambda ns: ns):
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.ledger = ledger  # told of every entry that comes and goes
        self.disk = disk
        self.spill_all = spill_all  # write every stored entry to disk, not only evicted ones
        self.disk_namespace = disk_namespace  # an entry's namespace on disk (None: memory only)
        self.sessions = sessions if sessions is not None else Sessions()
        self._published: set[Key] = set()
        self._lru = LRUPromptCache(max_size=1 << 62)  # bounded here, by entries and bytes
        self._held: dict[Key, int] = {}  # key -> bytes of its buffers
        self._spilled: set[Key] = set()  # held entries handed to the disk tier once already
        self.sessions.alive = lambda key: key in self._held  # _held is replaced, not changed, at times
        self.hits = self.memory_hits = self.disk_hits = 0
        self.hit_tokens = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        """The bytes counted against ``max_bytes`` (memory only)."""
        return sum(self._held.values())

    def held_bytes(self) -> int:
        """The stored entries' bytes measured again (a check of ``nbytes``)."""
        return buffer_bytes([cache for entry in self.entries() for cache in entry])

    def entries(self) -> list[list[Any]]:
        """Every stored entry's caches (owned by the cache: read, never change)."""
        return [self._lru._trie.get(ns, tokens).prompt_cache for ns, tokens in self._keys()]

    def _keys(self) -> list[tuple[str, list[int]]]:
        """(namespace, tokens) of every entry, least recently stored first (mlx-lm's private fields)."""
        return [key for order in self._lru._lru._lrus.values() for key in order]

    def __len__(self) -> int:
        return len(self._lru)

    def figures(self) -> PrefixFigures:
        return PrefixFigures(len(self), self.nbytes, self.hits, self.misses, self.memory_hits, self.disk_hits,
                             self.disk.stats() if self.disk is not None else NO_DISK, len(self.sessions))

    def covered(self, prompt: Sequence[int], ns: str) -> int:
        """Tokens of ``prompt`` a ``take`` would serve from memory now (nothing is copied)."""
        tokens = list(prompt)
        if len(tokens) < 2:
            return 0
        found = self._lru._trie.search(ns, tokens)
        shorter = len(found.shorter) if found.shorter is not None else 0
        if found.exact is not None:
            entry = self._lru._trie.get(ns, found.exact)
            return len(tokens) - 1 if can_trim_prompt_cache(entry.prompt_cache) else self.covered(tokens[:-1], ns)
        if found.longer is not None and found.common_prefix > shorter:
            if can_trim_prompt_cache(self._lru._trie.get(ns, found.longer).prompt_cache):
                return min(len(tokens) - 1, found.common_prefix)
        return shorter

    def disk_candidate(self, prompt: Sequence[int], ns: str, min_tokens: int = 1) -> DiskEntry | None:
        """The disk tier's entry for ``prompt`` when it covers more than memory does (to read
        off this thread, then pass to ``take``); None otherwise."""
        disk = self.disk
        disk_ns = self.disk_namespace(ns) if disk is not None else None
        if disk is None or disk_ns is None or len(prompt) < 2:
            return None
        found = disk.find(disk_ns, prompt)
        if found is None or found[1] < max(min_tokens, 1) or found[1] <= self.covered(prompt, ns):
            return None
        return found[0]

    def take(self, prompt: Sequence[int], ns: str, min_tokens: int = 1, session: str = "",
             read: HostEntry | Literal[False] | None = None) -> PrefixHit | None:
        """The longest cached prefix of ``prompt`` (never all of it), caller-owned; None under ``min_tokens``.
        ``read``: a disk entry read for this prompt (else the disk tier is read here, on this thread)."""
        self.sessions.touch(session)
        tokens = list(prompt)
        if len(tokens) < 2:
            return None
        in_memory = self.covered(tokens, ns)
        if read is None:
            hit = self._from_disk(tokens, ns, in_memory)
        else:  # False: a read that failed
            hit = self._from_read(tokens, read, in_memory) if read else None
        if hit is None:
            hit = self._from_memory(tokens, ns)
        if hit is None or len(hit.tokens) < max(min_tokens, 1):
            self.misses += 1
            return None
        self.hits += 1
        self.hit_tokens += len(hit.tokens)
        if hit.tier == "disk":
            self.disk_hits += 1
        else:
            self.memory_hits += 1
        return hit

    def _from_memory(self, tokens: list[int], ns: str) -> PrefixHit | None:
        caches, rest = self._lru.fetch_nearest_cache(ns, tokens)
        if caches is not None and not rest:  # exact: give back all but the last token
            if can_trim_prompt_cache(caches):
                trim_prompt_cache(caches, 1)
                rest = tokens[-1:]
            else:
                tokens = tokens[:-1]
                caches, rest = self._lru.fetch_nearest_cache(ns, tokens)
        covered = len(tokens) - len(rest)
        return PrefixHit(tokens[:covered], caches) if caches is not None and covered > 0 else None

    def _from_disk(self, tokens: list[int], ns: str, in_memory: int) -> PrefixHit | None:
        """The disk tier's entry when it covers more than memory does (read here, on this thread)."""
        disk = self.disk
        disk_ns = self.disk_namespace(ns) if disk is not None else None
        if disk is None or disk_ns is None:
            return None
        found = disk.find(disk_ns, tokens)
        if found is None or found[1] <= in_memory:
            return None
        return self._from_read(tokens, disk.read(found[0]), in_memory)

    @staticmethod
    def _from_read(tokens: list[int], host: HostEntry | None, in_memory: int) -> PrefixHit | None:
        """A disk entry read for ``tokens`` as owned state, when it still covers more than memory."""
        if host is None:
            return None
        n = len(host.tokens)
        if n < len(tokens) and tokens[:n] == host.tokens:
            covered = n
        elif n >= len(tokens) and host.tokens[: len(tokens)] == tokens:
            covered = len(tokens) - 1
        else:
            return None
        if covered <= in_memory:
            return None
        caches = from_host(host)
        if n > covered:
            if not can_trim_prompt_cache(caches):
                return None
            trim_prompt_cache(caches, n - covered)
        return PrefixHit(tokens[:covered], caches, "disk")

    def install(self, host: HostEntry, ns: str, session: str = "") -> int:
        """Puts an entry read from disk into memory under namespace ``ns`` (a prefetch); returns its tokens."""
        self.disk_hits += 1
        self.put(host.tokens, from_host(host), ns, session)
        return len(host.tokens)

    def put(self, tokens: Sequence[int], caches: list[Any], ns: str, session: str = "") -> None:
        """Stores ``caches`` (covering exactly ``tokens``); ownership moves to the cache."""
        if not tokens:
            return
        stored = exact(caches)
        key = (ns, tuple(tokens))
        self._lru.insert_cache(ns, list(tokens), stored)  # may drop entries it covers
        self._held[key] = buffer_bytes(stored)
        self.sessions.touch(session, key)
        if self.disk is not None and self.spill_all:
            self._spill(key, stored)
        self._forget_dropped()
        self._shrink()
        self._publish()

    def close_session(self, session: str) -> int:
        """Ends ``session``'s affinity; returns how many stored entries it held."""
        return self.sessions.close(session)

    def clear(self) -> None:
        """Drops every entry, on disk too."""
        self._lru.trim_to(n_sequences=0)
        self._held.clear()
        self._spilled.clear()
        self.sessions.clear()
        if self.disk is not None:
            self.disk.clear()
        self._published = set()
        if self.ledger is not None:
            self.ledger.cleared()

    def _shrink(self) -> None:
        while self._held and (self.nbytes > self.max_bytes or len(self._held) > self.max_entries):
            key = self._victim()
            if self.disk is not None and not self.spill_all:
                self._spill(key, self._lru._trie.get(key[0], list(key[1])).prompt_cache)
            self._drop(key)

    def _victim(self) -> Key:
        pinned = self.sessions.pinned()
        order = [(ns, tuple(tokens)) for ns, tokens in self._keys()]
        return next((key for key in order if key not in pinned), order[0])

    def _drop(self, key: Key) -> None:
        ns, tokens = key[0], list(key[1])
        entry = self._lru._trie.pop(ns, tokens)
        self._lru._lru.remove(ns, tokens)
        self._lru._n_bytes -= entry.nbytes
        self._lru._n_bytes_by_type[entry.cache_type] -= entry.nbytes
        del self._held[key]
        self._spilled.discard(key)

    def persist(self) -> None:
        """Queues every memory entry never handed to the disk tier (not those it evicted since)."""
        for ns, tokens in self._keys():
            if (ns, tuple(tokens)) not in self._spilled:
                self._spill((ns, tuple(tokens)), self._lru._trie.get(ns, tokens).prompt_cache)

    def _spill(self, key: Key, caches: list[Any]) -> None:
        disk_ns = self.disk_namespace(key[0])
        self._spilled.add(key)
        if disk_ns is None:
            return
        disk = self.disk
        assert disk is not None  # spilled only with a disk tier
        if not disk.contains(disk_ns, key[1]):
            disk.write(to_host(caches, disk_ns, list(key[1]), disk.fingerprint))

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
            self._spilled &= stored
