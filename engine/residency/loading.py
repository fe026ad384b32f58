"""The load half of the residency: LoadModel's steps (resolve, plan, read, convert, warm,
serve) and on-demand loads, each a task whose progress every subscriber sees from the start.

Invariant: a slot is LOADING from its first step until it is READY with an engine in the
model set, or dropped (an API load's slot) or UNLOADED again (a catalog model's) on failure
or cancel, its engine closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, AsyncIterator, Callable

from ..errors import EngineError, InvalidRequest, ModelExists, NotReady, Unsupported
from .catalog import ModelOptions, ModelSpec
from .convert import convert_in_child, converted
from .slot import LOADING, READY, UNLOADED, UNLOADING, LoadProgress, Slot
from .sources import ModelFiles, anywhere, inside_root

if TYPE_CHECKING:
    from ..models import Engine, ModelSet
    from .lifecycle import Lifecycle

log = logging.getLogger("engine.residency")
_READ_CHUNK = 16 << 20
_PROGRESS_EVERY_S = 0.1


class LoadSteps:
    """Mixed into Residency, which owns these and the room and keep-alive they call on."""

    slots: dict[str, Slot]
    aliases: dict[str, tuple[str, str]]
    models: ModelSet
    lifecycle: Lifecycle
    loads: int
    _changed: asyncio.Condition

    async def _make_room(self, slot: Slot, wait_s: float | None) -> list[str]:
        raise NotImplementedError

    def _idle(self, slot: Slot) -> None:
        raise NotImplementedError

    async def load(self, name: str, source: str, kind: str = "generation", options=None,
                   keep_alive_s: float | None = None, wait_s: float | None = None) -> AsyncIterator[LoadProgress]:
        """LoadModel: a new model from the root (``source``), or a catalog entry (``source`` empty)."""
        started = time.monotonic()
        slot = self.slots.get(name)
        if source:
            if slot is not None or name in self.aliases:
                raise ModelExists(f"a model named {name!r} is already served or loading; unload it first",
                                  metadata={"model": name})
            self._factory()
            files = await asyncio.to_thread(inside_root, source, self.lifecycle.root)
            if options is not None and options.draft_model:
                draft = await asyncio.to_thread(inside_root, options.draft_model, self.lifecycle.root, "draft_model")
                options = replace(options, draft_model=str(draft.artifact))
            spec = ModelSpec(name, str(files.artifact), kind, options or ModelOptions(), keep_alive_s)
            slot = self.slots[name] = Slot(spec)
        elif slot is None or not slot.spec.on_demand:
            raise InvalidRequest("source", "is required (the name is no catalog model)")
        elif slot.state == READY:
            yield LoadProgress("serving", engine=slot.engine, elapsed_s=time.monotonic() - started)
            return
        else:
            files = None
        if keep_alive_s is not None:
            slot.keep_alive_s = keep_alive_s
        if slot.state == UNLOADING and slot.unload_task is not None:
            await asyncio.shield(slot.unload_task)
        own = slot.state == UNLOADED
        task = self._begin(slot, wait_s, files) if own else slot.load_task
        queue = slot.subscribe()
        try:
            while True:
                event = await queue.get()
                if event is None:
                    break
                yield LoadProgress(event.stage, event.done, event.total, event.evicted, event.engine,
                                   time.monotonic() - started)
                if event.stage == "serving":
                    return
            assert task is not None
            await task  # raises the load's error
        finally:
            slot.listeners.remove(queue)
            if own and task is not None and not task.done() and slot.state == LOADING:
                task.cancel()  # the caller went away before SERVING: abandon its load

    def _begin(self, slot: Slot, wait_s: float | None, files: ModelFiles | None = None) -> asyncio.Task:
        slot.state, slot.progress, slot.load_started = LOADING, [], time.monotonic()
        task = slot.load_task = asyncio.create_task(self._run_load(slot, files, wait_s), name=f"load-{slot.name}")
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # waiters see the error; none is lost
        return task

    async def _run_load(self, slot: Slot, files: ModelFiles | None, wait_s: float | None) -> None:
        engine = None
        try:
            slot.publish(LoadProgress("resolving"))
            if files is None:
                files = await asyncio.to_thread(anywhere, slot.spec.source)
            slot.planned_bytes = files.total_bytes
            slot.publish(LoadProgress("planning", total=slot.planned_bytes))
            evicted = await self._make_room(slot, wait_s)
            slot.publish(LoadProgress("planning", total=slot.planned_bytes, evicted=tuple(evicted)))
            await self._read(slot, files)
            if files.gguf and not await asyncio.to_thread(converted, files.artifact):
                async for fraction in convert_in_child(files.artifact):
                    slot.publish(LoadProgress("converting", int(fraction * 1000), 1000))
            slot.publish(LoadProgress("warming"))
            engine = self._factory()(slot.spec)
            self.models.share(engine)
            await engine.start()
            slot.engine, slot.state = engine, READY
            slot.resident_bytes = engine.weights_bytes
            slot.load_seconds = time.monotonic() - slot.load_started
            slot.last_used = time.monotonic()
            self.models.add(engine)
            self.loads += 1
            log.info("loaded %s in %.1f s (%d bytes of weights)", slot.name, slot.load_seconds, slot.resident_bytes)
            slot.publish(LoadProgress("serving", engine=engine))
            self._idle(slot)
        except BaseException as error:
            if engine is not None:
                await asyncio.shield(engine.close())
            self._dropped(slot)
            for queue in slot.listeners:
                queue.put_nowait(None)
            if not isinstance(error, (EngineError, asyncio.CancelledError)):
                log.error("loading %s failed", slot.name, exc_info=error)
                raise NotReady(f"model {slot.name!r} failed to load; see the server log", retry_after_s=5.0) from error
            raise
        finally:
            async with self._changed:
                self._changed.notify_all()

    def _factory(self) -> Callable[[ModelSpec], Engine]:
        if self.lifecycle.factory is None:
            raise Unsupported("this server loads no models at run time")
        return self.lifecycle.factory

    async def _read(self, slot: Slot, files: ModelFiles) -> None:
        """Reads the weight files once (the page cache then serves the engine's load), with progress."""
        done, total, shown = 0, files.total_bytes, 0.0

        def read(path, offset: int) -> int:
            with open(path, "rb", buffering=0) as f:
                f.seek(offset)
                return len(f.read(_READ_CHUNK))

        for path, size in files.weights:
            offset = 0
            while offset < size:
                got = await asyncio.to_thread(read, path, offset)
                if not got:
                    break
                offset, done = offset + got, done + got
                if time.monotonic() - shown >= _PROGRESS_EVERY_S or done == total:
                    slot.publish(LoadProgress("reading", done, total))
                    shown = time.monotonic()

    def _dropped(self, slot: Slot) -> None:
        slot.engine, slot.resident_bytes, slot.progress = None, 0, []  # "serving" held the engine
        if slot.spec.on_demand:
            slot.state = UNLOADED
        else:
            self.slots.pop(slot.name, None)

