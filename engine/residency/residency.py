"""The models a server holds at run time: load (with progress), unload, on-demand loads with
keep-alive, and the least recently used idle model unloaded for room under one memory limit.

Invariants: the sum of the slots' ``held_bytes`` never exceeds ``memory_limit`` (a load
reserves its planned bytes before reading a byte); a model in use (leases) or pinned is
never unloaded for room or idleness; a source outside the model root, and a model that can
never fit, are refused before any file is read. Event loop only; the blocking parts (stat,
reads, conversion, the engine's own load) run in threads, a child process or the model's
own engine thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from typing import AsyncIterator, Callable

from ..errors import DoesNotFit, ModelHeld, ModelNotFound, NoRoomForModel, NotReady
from ..hardware.allocator import release_freed_memory
from ..hardware.machine import usable_memory
from ..models import Engine, ModelSet
from .catalog import ModelSpec
from .lifecycle import Lifecycle
from .loading import LoadSteps
from .slot import LOADING, READY, UNLOADED, UNLOADING, Slot

log = logging.getLogger("engine.residency")


class Residency(LoadSteps):
    def __init__(self, models: ModelSet, lifecycle: Lifecycle):
        self.models = models
        self.lifecycle = lifecycle
        self.memory_limit = lifecycle.memory_limit or usable_memory()[0]
        self.aliases = dict(lifecycle.catalog.aliases)
        self.held = lifecycle.held  # served by a worker contract: never unloaded
        self.slots: dict[str, Slot] = {spec.name: Slot(spec) for spec in lifecycle.catalog.models}
        self.loads = 0
        self.unloads = 0
        self._changed = asyncio.Condition()
        self._planning = asyncio.Lock()

    async def start(self) -> None:
        """Takes in the command line's models (loaded by now: pinned), then loads the catalog's pinned ones."""
        clash = [e.name for e in self.models.all if e.name in self.slots and self.slots[e.name].engine is not e]
        if clash:
            raise ValueError(f"catalog model {clash[0]!r}: a model of that name is served from the command line")
        self._adopt()
        for slot in [s for s in self.slots.values() if s.spec.pinned and s.state == UNLOADED]:
            await self._begin(slot, None)

    def _adopt(self) -> None:
        """Slots for the ready engines the set was built with (pinned: the command line's), first."""
        new = {e.name: e for e in self.models.all if e.ready and e.name not in self.slots}
        if not new:
            return
        static = {}
        for name, engine in new.items():
            slot = Slot(ModelSpec(name, engine.source, _kind(engine), pinned=True), state=READY, engine=engine)
            slot.resident_bytes = engine.weights_bytes
            static[name] = slot
            self.loads += 1
        self.slots = {**static, **self.slots}

    async def close(self) -> None:
        for slot in self.slots.values():
            slot.cancel_expiry()
            for task in (slot.load_task, slot.unload_task):
                if task is not None and not task.done():
                    task.cancel()

    # ---- what ListModels shows ----

    def visible(self, tenant: str, admin: bool) -> list[Slot]:
        self._adopt()
        return [s for s in self.slots.values() if admin or s.spec.allows(tenant)]

    def aliases_of(self, name: str) -> list[str]:
        return [alias for alias, (model, _) in self.aliases.items() if model == name]

    # ---- room ----

    def held_bytes(self, but: Slot | None = None) -> int:
        return sum(s.held_bytes for s in self.slots.values() if s is not but)

    async def _make_room(self, slot: Slot, wait_s: float | None) -> list[str]:
        """Unloads idle models, least recently used first, until ``slot``'s planned bytes fit."""
        need = slot.planned_bytes
        fixed = sum(s.held_bytes for s in self.slots.values()
                    if s is not slot and (s.spec.pinned or s.name in self.held))
        figures = {"model": slot.name, "planned_bytes": str(need), "memory_limit_bytes": str(self.memory_limit),
                   "pinned_bytes": str(fixed)}
        if need > self.memory_limit - fixed:
            raise DoesNotFit(f"model {slot.name!r} needs {need} bytes of weights; the server's model memory limit "
                             f"is {self.memory_limit} bytes, {fixed} of them held by pinned models",
                             metadata=figures)
        deadline = None if wait_s is None else time.monotonic() + wait_s
        evicted: list[str] = []
        async with self._planning:
            while need > self.memory_limit - self.held_bytes(but=slot):
                idle = sorted((s for s in self.slots.values() if s is not slot and s.state == READY and not s.in_use
                               and not s.spec.pinned and s.name not in self.held), key=lambda s: s.last_used)
                if idle:
                    await self._unload(idle[0], cancel=False, why="room")
                    evicted.append(idle[0].name)
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise NoRoomForModel(f"no room for model {slot.name!r}: the resident models that could make "
                                         "room are in use", metadata=figures, retry_after_s=1.0)
                async with self._changed:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), left)
        return evicted

    # ---- unloading ----

    async def unload(self, name: str, cancel: bool = False) -> tuple[int, str]:
        """UnloadModel: (bytes freed, the state left)."""
        slot = self.slots.get(name)
        if slot is None or slot.state == UNLOADED:
            raise ModelNotFound(name, [s.name for s in self.slots.values() if s.state != UNLOADED])
        if name in self.held:
            raise ModelHeld(f"model {name!r} serves this server's worker contract; it stays loaded",
                            metadata={"model": name})
        if slot.state == LOADING:
            raise ModelHeld(f"model {name!r} is loading; unload it once it is ready", metadata={"model": name})
        freed = slot.resident_bytes
        await asyncio.shield(self._unload(slot, cancel, why="request"))
        return freed, slot.state if slot.spec.on_demand else UNLOADED

    def _unload(self, slot: Slot, cancel: bool, why: str) -> asyncio.Task:
        if slot.state == UNLOADING and slot.unload_task is not None:
            return slot.unload_task
        slot.state = UNLOADING
        slot.cancel_expiry()
        self.models.retire(slot.engine)
        slot.unload_task = asyncio.create_task(self._finish_unload(slot, cancel, why), name=f"unload-{slot.name}")
        return slot.unload_task

    async def _finish_unload(self, slot: Slot, cancel: bool, why: str) -> None:
        engine = slot.engine
        if not cancel:
            async with self._changed:
                await self._changed.wait_for(lambda: slot.leases == 0)
        await engine.close()
        self.models.forget(engine)
        self._dropped(slot)
        del engine
        await asyncio.to_thread(_free_memory)
        self.unloads += 1
        log.info("unloaded %s (%s)", slot.name, why)
        async with self._changed:
            self._changed.notify_all()

    # ---- requests ----

    @contextlib.asynccontextmanager
    async def use(self, name: str, pick: Callable[[str], Engine], tenant: str, keep_alive_s: float | None = None,
                  wait_s: float | None = None) -> AsyncIterator[tuple[Engine, str]]:
        """The engine a request names (an alias selects its adapter too), loading a catalog
        model first; the engine is not unloaded for room or idleness while the call holds it."""
        self._adopt()
        model, adapter = self.aliases.get(name, (name, ""))
        slot = self.slots.get(model) if model else None
        if slot is not None and not slot.spec.allows(tenant):
            raise ModelNotFound(model, [s.name for s in self.visible(tenant, False) if s.state == READY])
        if slot is not None and slot.state != READY:
            slot.waiting += 1
            try:
                await self._ready(slot, wait_s)
            finally:
                slot.waiting -= 1
        engine = pick(model)
        held = self.slots.get(engine.name)
        if held is not None:
            held.leases += 1
            held.cancel_expiry()
            if keep_alive_s is not None and held.spec.on_demand and not held.spec.pinned:
                held.keep_alive_s = keep_alive_s
        try:
            yield engine, adapter
        finally:
            if held is not None:
                held.leases -= 1
                held.last_used = time.monotonic()
                async with self._changed:
                    self._changed.notify_all()
                self._idle(held)

    async def _ready(self, slot: Slot, wait_s: float | None) -> None:
        if slot.state == UNLOADING:
            if not slot.spec.on_demand or slot.unload_task is None:
                raise NotReady(f"model {slot.name!r} is unloading", retry_after_s=1.0)
            await asyncio.shield(slot.unload_task)
        if slot.state == UNLOADED:
            self._begin(slot, wait_s)
        task = slot.load_task
        assert task is not None
        expected = slot.expected_load_s()
        if wait_s is not None and wait_s < expected:
            raise NotReady(f"model {slot.name!r} is loading (about {expected:.0f} s more)", retry_after_s=expected)
        try:
            await asyncio.wait_for(asyncio.shield(task), wait_s)
        except asyncio.TimeoutError:
            raise NotReady(f"model {slot.name!r} is still loading", retry_after_s=slot.expected_load_s()) from None

    def _idle(self, slot: Slot) -> None:
        """Schedules the keep-alive unload of an idle on-demand model."""
        keep = slot.keep_alive_s
        if slot.in_use or slot.state != READY or slot.spec.pinned or keep is None or keep < 0 or slot.name in self.held:
            return
        slot.cancel_expiry()
        slot.expiry = asyncio.get_running_loop().call_later(keep, self._expire, slot)

    def _expire(self, slot: Slot) -> None:
        slot.expiry = None
        if slot.state == READY and not slot.in_use:
            self._unload(slot, cancel=False, why="idle")


def _kind(engine: Engine) -> str:
    return "generation" if hasattr(engine, "generate") else "speech" if hasattr(engine, "transcribe") else "embedding"


def _free_memory() -> None:
    """Returns what the unloaded model held to the system (MLX's buffer cache and the heap included)."""
    import mlx.core as mx

    gc.collect()
    mx.clear_cache()
    release_freed_memory()  # what the heap keeps for the next forward, the model's share included

