"""The event loop's view of one model's adapters: names, users, least recently used.

Invariant: only an adapter without users may go, and one without users is in no row of any
forward (a stream closes only after the engine thread let its sequence go). Event loop only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from dataclasses import dataclass, field

from ..errors import AdapterCapacity, AdapterExists, AdapterNotFound
from .info import AdapterInfo


@dataclass(eq=False)
class Entry:
    info: AdapterInfo
    last_used: int = 0
    users: int = 0
    retiring: bool = False
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()


class Catalog:
    def __init__(self, model: str, limit: int):
        if limit < 1:
            raise ValueError("the adapter limit must be at least 1")
        self.model = model
        self.limit = limit
        self._entries: dict[str, Entry] = {}
        self._loading: set[str] = set()
        self._clock = itertools.count(1)

    def infos(self) -> list[AdapterInfo]:
        """The loaded adapters, in load order."""
        entries = list(self._entries.values())  # one step: metrics read this from their own thread
        return [dataclasses.replace(e.info, active_requests=e.users, unloading=e.retiring) for e in entries]

    def get(self, name: str) -> Entry:
        entry = self._entries.get(name)
        if entry is None:
            raise AdapterNotFound(self.model, name, self._available())
        return entry

    def acquire(self, name: str) -> Entry:
        """Counts a request as a user of ``name``; ``release`` it exactly once."""
        entry = self.get(name)
        if entry.retiring:
            raise AdapterNotFound(self.model, name, self._available())
        entry.users += 1
        entry.last_used = next(self._clock)
        entry.idle.clear()
        return entry

    @staticmethod
    def release(entry: Entry) -> None:
        entry.users -= 1
        if entry.users == 0:
            entry.idle.set()

    def check_free(self, name: str) -> None:
        """``AdapterExists`` if ``name`` is loaded, loading or unloading now."""
        if name in self._entries or name in self._loading:
            raise AdapterExists(f"adapter {name!r} is already loaded (or loading, or unloading) on model "
                                f"{self.model!r}; unload it first", metadata={"model": self.model, "adapter": name})

    def reserve(self, name: str) -> list[Entry]:
        """Claims ``name`` for a load; returns the idle adapters to evict for room."""
        self.check_free(name)
        excess = len(self._entries) + len(self._loading) + 1 - self.limit
        idle = sorted((e for e in self._entries.values() if not e.users and not e.retiring),
                      key=lambda e: e.last_used)
        if excess > len(idle):
            raise AdapterCapacity(f"model {self.model!r} holds its limit of {self.limit} adapters and every one "
                                  "is in use by requests (or being loaded or unloaded); retry later or unload one",
                                  metadata={"model": self.model, "limit": str(self.limit)})
        victims = idle[:max(excess, 0)]
        for entry in victims:
            entry.retiring = True
        self._loading.add(name)
        return victims

    def commit(self, name: str, info: AdapterInfo, victims: list[Entry]) -> None:
        self._loading.discard(name)
        for entry in victims:
            self._entries.pop(entry.info.name, None)
        self._entries[name] = Entry(info, last_used=next(self._clock))

    def abandon(self, name: str, victims: list[Entry]) -> None:
        self._loading.discard(name)
        for entry in victims:
            entry.retiring = False

    def retire(self, name: str) -> Entry:
        """Marks ``name`` for unloading: no new request may take it."""
        entry = self.get(name)
        if entry.retiring:  # already on its way out (evicted by a load)
            raise AdapterNotFound(self.model, name, self._available())
        entry.retiring = True
        return entry

    def remove(self, entry: Entry) -> None:
        if self._entries.get(entry.info.name) is entry:
            del self._entries[entry.info.name]

    def _available(self) -> list[str]:
        return [name for name, e in self._entries.items() if not e.retiring]
