"""The engine thread: owns a model, its caches, its sequences and all MLX work for it.
Other threads reach it only by typed messages; anything escaping its loop kills it,
and it then ends everything it holds."""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from ...adapters.source import AdapterFiles
from ...errors import EngineDead
from ...events import FinishReason
from ...hardware.device import end_thread
from ...liveness import Heartbeat, Pending, settle
from ..sequence.state import SequenceState

log = logging.getLogger("engine.generation.scheduling.worker")
T = TypeVar("T")


@dataclass(frozen=True)
class Submit:
    sequence: SequenceState


@dataclass(frozen=True)
class Cancel:
    """End this request, whatever state it is in."""

    request_id: str


@dataclass(frozen=True)
class Stats:
    """Asks for ``SchedulerStats``."""


@dataclass(frozen=True)
class PlanMemory:
    """0: the model's context length."""

    context_tokens: int
    max_generation_tokens: int = 0


@dataclass(frozen=True)
class LoadAdapter:
    """Installs an adapter's arrays (read off the thread), then unloads ``evict`` (chosen to make room)."""

    name: str
    files: AdapterFiles
    evict: tuple[str, ...]
    field: str


@dataclass(frozen=True)
class UnloadAdapter:
    """Removes an adapter no request uses; its memory returns to the budget."""

    key: str


@dataclass(frozen=True)
class FlushPrefixCache:
    """Drops every prefix-cache entry (running requests keep their own caches); answers how many."""


@dataclass(frozen=True)
class PeekPrefix:
    """Answers the prompt tokens the memory tier covers now (a prefetch's first look); touches the session."""

    tokens: tuple[int, ...]
    namespace: str
    session: str


@dataclass(frozen=True)
class InstallPrefix:
    """Puts an entry read from the disk tier (off the thread) into memory; answers its tokens."""

    entry: object  # a HostEntry
    namespace: str  # the memory tier's (the entry's own is the disk tier's)
    session: str


@dataclass(frozen=True)
class CloseSession:
    """Ends a session's affinity; answers how many entries it held."""

    session: str


@dataclass(frozen=True)
class Probe:
    """Tests only: runs ``fn(scheduler)`` between ticks."""

    fn: Callable[[object], object]


@dataclass(frozen=True)
class Shutdown:
    pass


Query = (Stats | PlanMemory | LoadAdapter | UnloadAdapter | FlushPrefixCache | PeekPrefix | InstallPrefix
         | CloseSession | Probe)


@dataclass(frozen=True)
class _Asked:
    query: Query
    future: Future


class Worker(Generic[T]):
    """Runs ``load()`` then a loop of ``scheduler.tick()`` on its own thread."""

    def __init__(self, name: str, load: Callable[[], T], make_scheduler: Callable[[T], object]):
        self._load = load
        self._make_scheduler = make_scheduler
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._early: deque = deque()  # messages read ahead by ``stop_requested``, in order
        self.ready: Future[T] = Future()
        self.heartbeat = Heartbeat()
        self.died = ""  # why the thread died, once it has
        self._pending = Pending()
        self._serving = False
        self._stopping = False
        self._abandoned = False  # given up for broken: stop() does not wait for it
        self._thread = threading.Thread(target=self._run, name=f"engine-{name}", daemon=True)

    def start(self) -> Future[T]:
        self._thread.start()
        return self.ready

    def submit(self, sequence: SequenceState) -> None:
        self._inbox.put(Submit(sequence))

    def cancel(self, request_id: str) -> None:
        self._inbox.put(Cancel(request_id))

    def ask(self, query: Query) -> Future:
        """The scheduler answers ``query`` between ticks; a future of the answer."""
        future = self._pending.track(Future())
        if not future.done():
            self._inbox.put(_Asked(query, future))
        return future

    def probe(self, fn: Callable[[object], object]) -> Future:
        return self.ask(Probe(fn))

    def fault(self, stall_timeout_s: float = 0.0) -> str:
        """Why the thread no longer serves (stalled: past ``stall_timeout_s`` > 0); "" if it does."""
        if self.died:
            return f"its engine thread died: {self.died}"
        if self._serving and not self._stopping and not self._thread.is_alive():
            return "its engine thread ended"
        stalled = self.heartbeat.stalled_for()
        if 0 < stall_timeout_s < stalled:
            return f"its engine thread made no progress for {stalled:.1f}s with work pending"
        return ""

    def give_up(self, error: EngineDead) -> None:
        """Event loop: fails every call waiting on the thread, and any made later."""
        self._abandoned = True
        self._pending.fail_all(error)

    def stop_requested(self, request_id: str) -> bool:
        """Engine thread: a Cancel of ``request_id`` or a Shutdown is waiting (messages read
        ahead are handled in order at the next drain)."""
        while True:
            try:
                self._early.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        return any(isinstance(m, Shutdown) or (isinstance(m, Cancel) and m.request_id == request_id)
                   for m in self._early)

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stopping = True
        self._inbox.put(Shutdown())
        if self._thread.is_alive() and not self._abandoned:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            end_thread()

    def _serve(self) -> None:
        try:
            loaded = self._load()
            scheduler = self._make_scheduler(loaded)
        except BaseException as exc:  # surfaced to whoever awaits readiness
            log.exception("model failed to load")
            self.ready.set_exception(exc)
            return
        self._serving = True
        self.ready.set_result(loaded)
        try:
            self._loop(scheduler)
        except BaseException as exc:  # noqa: BLE001 - the thread ends: say so, end what it holds
            self._die(scheduler, exc)

    def _loop(self, scheduler) -> None:
        while True:
            self.heartbeat.beat()
            if not self._drain(scheduler):
                scheduler.shutdown("server is shutting down")
                return
            self.heartbeat.beat()
            try:
                scheduler.tick()
            except Exception as exc:  # one bad tick must not kill the thread
                log.exception("engine tick failed; failing running requests")
                scheduler.fail_running(f"engine failure: {type(exc).__name__}")

    def _die(self, scheduler, exc: BaseException) -> None:
        self.died = type(exc).__name__
        log.critical("the engine thread died; failing every request it holds", exc_info=exc)
        message = f"engine failure: {self.died}"
        self._pending.fail_all(EngineDead(f"the engine thread died ({self.died})"))
        try:
            scheduler.shutdown(message, FinishReason.ERROR)
        except BaseException:  # the event loop's watchdog ends those streams
            log.exception("could not fail the requests of a dead engine thread")
        while True:  # sequences submitted but never read
            try:
                item = self._early.popleft() if self._early else self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Submit):
                try:
                    item.sequence.finish(FinishReason.ERROR, error=message)
                except BaseException:
                    log.exception("could not fail a request of a dead engine thread")

    def _drain(self, scheduler) -> bool:
        """Blocks while idle; False means shut down."""
        while True:
            idle = scheduler.idle and not self._early
            if idle:
                self.heartbeat.rest()
            try:
                message = self._early.popleft() if self._early else self._inbox.get(block=idle)
            except queue.Empty:
                return True
            self.heartbeat.beat()
            if isinstance(message, Shutdown):
                return False
            if isinstance(message, Submit):
                scheduler.submit(message.sequence)
            elif isinstance(message, Cancel):
                scheduler.cancel(message.request_id)
            elif isinstance(message, _Asked):
                settle(message.future, lambda: scheduler.answer(message.query))
