"""A generation engine's adapters, from the event loop: load, unload, list, lease.

Invariants: files are read and checked off the engine thread before it installs
anything (between ticks); API paths lie inside the adapter root; an unload takes no
new request and completes only once the requests using the adapter finish.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Protocol, TypeVar

from ..errors import InvalidRequest
from ..serving.protocol import Asks, Control
from . import paths
from .catalog import Catalog, Entry
from .info import AdapterInfo
from .reads import Reads
from .source import AdapterFiles, AdapterLimits, read_files

if TYPE_CHECKING:
    from ..memory.budget import MemoryBudget
    from .bank import AdapterBank


T = TypeVar("T")


class HoldsAdapters(Protocol):
    """An engine thread's scheduler, as the adapter controls read it."""

    @property
    def adapters(self) -> AdapterBank | None: ...
    @property
    def budget(self) -> MemoryBudget | None: ...


def _bank(scheduler: HoldsAdapters) -> AdapterBank:
    if scheduler.adapters is None:
        raise RuntimeError("this engine thread holds no adapters")
    return scheduler.adapters


@dataclass(frozen=True)
class LoadAdapter(Control[HoldsAdapters, AdapterInfo]):
    """Installs an adapter's arrays (read off the thread), then unloads ``evict`` (chosen to make room)."""

    name: str
    files: AdapterFiles
    evict: tuple[str, ...]
    field: str

    def answer(self, scheduler: HoldsAdapters) -> AdapterInfo:
        return _bank(scheduler).load(self.name, self.files, evict=list(self.evict), budget=scheduler.budget,
                                     field=self.field)


@dataclass(frozen=True)
class UnloadAdapter(Control[HoldsAdapters, None]):
    """Removes an adapter no request uses; its memory returns to the budget."""

    key: str

    def answer(self, scheduler: HoldsAdapters) -> None:
        _bank(scheduler).unload(self.key, scheduler.budget)


class Loaded(NamedTuple):
    info: AdapterInfo
    evicted: list[str]  # adapters unloaded to make room, least recently used first


NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_NAME = 64


class Adapters:
    def __init__(self, ask: Asks, model: str, limit: int, *, root: str | None = None,
                 limits: AdapterLimits = AdapterLimits(), room: Callable[[], int | None] = lambda: None):
        """``ask(query)``: the engine thread's answer; ``room()``: the model's fixed free bytes (or None)."""
        self._engine_ask = ask
        self.catalog = Catalog(model, limit)
        self.root = root
        self.limits = limits
        self._room = room
        self._reads = Reads()
        self._unloading: dict[str, asyncio.Future] = {}

    @property
    def limit(self) -> int:
        return self.catalog.limit

    def infos(self) -> list[AdapterInfo]:
        return self.catalog.infos()

    def digest_of(self, key: str) -> str:
        """The content digest of the loaded adapter with ``key`` ("" if none)."""
        return next((info.digest for info in self.catalog.infos() if info.key == key), "")

    def acquire(self, name: str, closers: list[Callable[[], None]], field: str = "adapter") -> str:
        """The key of adapter ``name`` ("" for none), in use until ``closers`` run."""
        if not name:
            return ""
        check_name(name, field)
        entry = self.catalog.acquire(name)
        closers.append(lambda: self.catalog.release(entry))
        return entry.info.key

    async def load(self, name: str, path: str, *, field: str = "path") -> Loaded:
        """Loads an adapter from under the root, evicting idle ones beyond the limit (LRU)."""
        check_name(name, "name")
        if not path:
            raise InvalidRequest(field, "is required")
        return await self._load(name, lambda: paths.inside_root(path, self.root, field), field)

    async def _load(self, name: str, locate: Callable[[], paths.Place], field: str) -> Loaded:
        self.catalog.check_free(name)
        room, limits = self._room(), self.limits
        files: AdapterFiles = await self._reads.run(lambda: read_files(locate(), limits, room, field))
        victims = self.catalog.reserve(name)
        keys = [v.info.key for v in victims]
        try:
            info = await self._ask(LoadAdapter(name, files, tuple(keys), field))
        except BaseException:
            self.catalog.abandon(name, victims)
            raise
        self.catalog.commit(name, info, victims)
        return Loaded(info, [v.info.name for v in victims])

    async def load_all(self, pairs: tuple[tuple[str, str], ...]) -> None:
        """Loads the (name, directory) adapters a model starts with; none is evicted."""
        if len(pairs) > self.limit:
            raise InvalidRequest("adapters", f"{len(pairs)} adapters exceed the limit of {self.limit} per model")
        for name, path in pairs:
            check_name(name, "adapters")
            await self._load(name, lambda: paths.anywhere(path, self.root, "adapters"), "adapters")

    async def unload(self, name: str) -> AdapterInfo:
        """Unloads ``name`` once the requests using it have finished."""
        task = self._unloading.get(name)
        if task is None:
            check_name(name, "name")
            entry = self.catalog.retire(name)
            task = self._unloading[name] = asyncio.ensure_future(self._unload_when_idle(entry))
        return await asyncio.shield(task)

    def close(self) -> None:
        for task in self._unloading.values():
            task.cancel()

    async def _unload_when_idle(self, entry: Entry) -> AdapterInfo:
        try:
            await entry.idle.wait()
            await self._ask(UnloadAdapter(entry.info.key))
            self.catalog.remove(entry)
            return entry.info
        finally:
            self._unloading.pop(entry.info.name, None)

    async def _ask(self, control: Control[Any, T]) -> T:
        return await asyncio.wrap_future(self._engine_ask(control))


def check_name(name: str, field: str) -> None:
    if not name or len(name) > MAX_NAME or not set(name) <= NAME_CHARS:
        raise InvalidRequest(field, f"an adapter name is 1 to {MAX_NAME} characters of A-Z, a-z, 0-9, '.', '_', '-'")
