"""Exact reusable work keyed by string (embeddings of repeated inputs, rendered prompts).

Invariants: ``put`` transfers ownership; an entry is never dropped while leased, and
``on_evict`` runs only after its last lease ends; bounded by count and size. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

V = TypeVar("V")


@dataclass
class _Entry(Generic[V]):
    value: V
    size: int
    leases: int = 0
    evicted: bool = False


class ObjectLease(Generic[V]):

    def __init__(self, cache: "ObjectCache[V]", entry: _Entry[V]):
        self._cache, self._entry, self._released = cache, entry, False
        self.value = entry.value

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._cache._return(self._entry)

    def __enter__(self) -> V:
        return self.value

    def __exit__(self, *exc) -> None:
        self.release()


class ObjectCache(Generic[V]):
    def __init__(self, max_entries: int, max_size: int = 1 << 62,
                 size_of: Callable[[V], int] = lambda _: 1,
                 on_evict: Callable[[V], None] | None = None,
                 key_size: Callable[[str], int] = lambda _: 0):
        if max_entries < 0 or max_size < 0:
            raise ValueError("invalid object cache bounds")
        self._entries: OrderedDict[str, _Entry[V]] = OrderedDict()
        self._max_entries, self._max_size = max_entries, max_size
        self._size_of, self._on_evict, self._key_size = size_of, on_evict, key_size
        self._size = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        return self._size

    def take(self, key: str) -> ObjectLease[V] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            entry.leases += 1
            self.hits += 1
            return ObjectLease(self, entry)

    def put(self, key: str, value: V) -> None:
        entry = _Entry(value, max(int(self._size_of(value)) + int(self._key_size(key)), 0))
        with self._lock:
            old = self._entries.pop(key, None)
            removed = [self._remove(old)] if old is not None else []
            self._entries[key] = entry
            self._size += entry.size
            removed += self._evict(keep=key)
        self._dispose(removed)

    def _remove(self, entry: _Entry[V]) -> _Entry[V]:
        self._size -= entry.size
        entry.evicted = True
        return entry

    def _evict(self, keep: str | None = None) -> list[_Entry[V]]:
        """Drops LRU unleased entries until within bounds (``keep`` last); visits only the
        entries it drops and the leased ones before them."""
        count, size, victims = len(self._entries), self._size, []
        for key, entry in self._entries.items():
            if count <= self._max_entries and size <= self._max_size:
                break
            if not entry.leases and (key != keep or count == 1):
                victims.append(key)
                count, size = count - 1, size - entry.size
        return [self._remove(self._entries.pop(key)) for key in victims]

    def _return(self, entry: _Entry[V]) -> None:
        with self._lock:
            entry.leases -= 1
            removed = self._evict()
        self._dispose(removed + [entry])

    def _dispose(self, entries: list[_Entry[V]]) -> None:
        """Runs ``on_evict`` once for removed entries nobody borrows any more."""
        for entry in entries:
            if entry.evicted and not entry.leases and self._on_evict is not None:
                entry.leases = -1  # disposed: never again
                self._on_evict(entry.value)
