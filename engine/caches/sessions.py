"""Session affinity for the prefix cache: the entries an open session stored are evicted
from memory after every other entry. An entry belongs to the last session that stored it;
a session is open while it holds a stored entry, until it is closed or stays ``idle_s``
without a request. Affinity changes only eviction order, never content. Engine thread only.
"""

from __future__ import annotations

import time
from typing import Callable, Hashable


class Sessions:
    def __init__(self, idle_s: float = 600.0, clock: Callable[[], float] = time.monotonic):
        self.idle_s = idle_s
        self._clock = clock
        self.alive: Callable[[Hashable], bool] = lambda key: True  # the cache's: is this entry still stored?
        self._keys: dict[str, set[Hashable]] = {}  # session -> keys of the entries it holds
        self._owner: dict[Hashable, str] = {}
        self._seen: dict[str, float] = {}

    def touch(self, session: str, key: Hashable | None = None) -> None:
        """A request of ``session`` arrived, or stored the entry ``key``."""
        if not session:
            return
        if key is not None:
            previous = self._owner.get(key)
            if previous is not None and previous != session:
                self._release(previous, key)
            self._owner[key] = session
            self._keys.setdefault(session, set()).add(key)
        if session in self._keys:
            self._seen[session] = self._clock()
        if len(self._owner) > 64 and len(self._owner) > 2 * sum(1 for k in self._owner if self.alive(k)):
            self._prune()

    def pinned(self) -> set[Hashable]:
        """Keys held by open sessions (idle ones close here; dropped entries are forgotten)."""
        self._prune()
        return set(self._owner)

    def close(self, session: str) -> int:
        """Closes ``session``; returns how many stored entries lost its affinity."""
        keys = self._keys.pop(session, set())
        self._seen.pop(session, None)
        for key in keys:
            del self._owner[key]
        return sum(1 for key in keys if self.alive(key))

    def clear(self) -> None:
        self._keys.clear()
        self._owner.clear()
        self._seen.clear()

    def __len__(self) -> int:
        self._prune()
        return len(self._keys)

    def _release(self, session: str, key: Hashable) -> None:
        keys = self._keys[session]
        keys.discard(key)
        if not keys:
            del self._keys[session], self._seen[session]

    def _prune(self) -> None:
        for key in [k for k in self._owner if not self.alive(k)]:
            self._release(self._owner.pop(key), key)
        if self.idle_s > 0:
            oldest = self._clock() - self.idle_s
            for session in [s for s, t in self._seen.items() if t <= oldest]:
                self.close(session)
