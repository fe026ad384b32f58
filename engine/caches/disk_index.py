"""The disk tier's index: its entries by key, bucketed by namespace tag and first ``HEAD``
tokens, so a lookup reads only the entries that can share the prompt's prefix. Not
thread-safe: ``DiskTier`` holds its lock around every call. Namespaces here are the
tier's keyed tags (disk_key.namespace_tag), never the names themselves."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

HEAD = 16  # entries are bucketed by their first HEAD tokens


@dataclass
class DiskEntry:
    namespace: str
    tokens: tuple[int, ...]
    path: Path
    nbytes: int
    used: float = field(default_factory=time.monotonic)


class DiskIndex:
    def __init__(self) -> None:
        self._entries: dict[str, DiskEntry] = {}
        self._heads: dict[tuple[str, tuple[int, ...]], set[str]] = {}  # (namespace, first HEAD tokens) -> keys

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __getitem__(self, key: str) -> DiskEntry:
        return self._entries[key]

    def get(self, key: str) -> DiskEntry | None:
        return self._entries.get(key)

    def values(self):
        return self._entries.values()

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def add(self, key: str, entry: DiskEntry) -> None:
        self._entries[key] = entry
        self._heads.setdefault((entry.namespace, entry.tokens[:HEAD]), set()).add(key)

    def pop(self, key: str) -> DiskEntry:
        entry = self._entries.pop(key)
        head = (entry.namespace, entry.tokens[:HEAD])
        bucket = self._heads[head]
        bucket.discard(key)
        if not bucket:
            del self._heads[head]
        return entry

    def clear(self) -> None:
        self._entries.clear()
        self._heads.clear()

    def candidates(self, namespace: str, prompt: tuple[int, ...]) -> list[tuple[str, DiskEntry]]:
        """Entries that may share a prefix with ``prompt``: its own bucket, and the entries
        shorter than HEAD tokens that start it."""
        keys = set(self._heads.get((namespace, prompt[:HEAD]), ()))
        for n in range(1, min(HEAD, len(prompt) + 1)):
            keys |= self._heads.get((namespace, prompt[:n]), set())
        if len(prompt) < HEAD:  # longer entries starting with the whole prompt
            keys |= {k for (ns, head), bucket in self._heads.items() if ns == namespace
                     and head[: len(prompt)] == prompt for k in bucket}
        return [(k, self._entries[k]) for k in keys]

    def best(self, namespace: str, prompt: tuple[int, ...], trimmable: bool) -> tuple[DiskEntry, int] | None:
        """The entry covering the most of ``prompt`` (never all of it) and how much it covers;
        an entry longer than the prompt serves it only where KV can be cut back (``trimmable``)."""
        best, best_n = None, 0
        for _, entry in self.candidates(namespace, prompt):
            n = len(entry.tokens)
            if n < len(prompt) and prompt[:n] == entry.tokens:
                covered = n
            elif trimmable and n >= len(prompt) and entry.tokens[: len(prompt)] == prompt:
                covered = len(prompt) - 1  # trimmed to leave the last token to compute
            else:
                continue
            if covered > best_n:
                best, best_n = entry, covered
        return (best, best_n) if best is not None else None

    def prefixes_of(self, key: str) -> list[str]:
        """Keys of the shorter entries that ``key``'s entry extends (same namespace)."""
        entry = self._entries[key]
        tokens = entry.tokens
        return [k for k, e in self.candidates(entry.namespace, tokens)
                if k != key and len(e.tokens) < len(tokens) and tokens[: len(e.tokens)] == e.tokens]

    def least_recent_first(self) -> list[str]:
        return sorted(self._entries, key=lambda k: self._entries[k].used)
