"""The engine thread: owns a model, its caches, its requests and all MLX work for them.
Other threads reach it only by the messages of ``protocol``; anything escaping its loop
kills it, and it then ends everything it holds. It runs on a host thread (``hosts``),
which the next engine reuses once it ends."""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Generic, Protocol, TypeVar

from ..errors import EngineDead
from ..events import FinishReason
from ..liveness import Heartbeat, Pending, settle
from . import hosts
from .protocol import Cancel, Control, Shutdown, Submit

log = logging.getLogger("engine.serving.thread")
L = TypeVar("L")  # what load() gives
W = TypeVar("W", bound="Work")  # a request's state on the thread
S = TypeVar("S", bound="Core[Any]")  # the scheduler that ticks
R = TypeVar("R")
W_in = TypeVar("W_in", contravariant=True)


class Work(Protocol):
    def finish(self, reason: FinishReason, *, error: str = ...) -> None: ...


class Core(Protocol[W_in]):
    """What the thread drives between messages."""

    @property
    def idle(self) -> bool: ...
    def submit(self, work: W_in) -> None: ...
    def cancel(self, key: str) -> bool: ...
    def tick(self) -> None: ...
    def fail_running(self, message: str) -> None: ...
    def shutdown(self, message: str, reason: FinishReason = ...) -> None: ...


@dataclass(frozen=True)
class _Asked:
    control: Control[Any, Any]
    future: Future


class EngineThread(Generic[L, W, S]):
    """Runs ``load()`` then a loop of ``scheduler.tick()`` on its own thread."""

    def __init__(self, name: str, load: Callable[[], L], make_scheduler: Callable[[L], S]):
        self._load = load
        self._make_scheduler = make_scheduler
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._early: deque = deque()  # messages read ahead by ``stop_requested``, in order
        self.ready: Future[L] = Future()
        self.heartbeat = Heartbeat()
        self.died = ""  # why the thread died, once it has
        self._pending = Pending()
        self._serving = False
        self._stopping = False
        self._abandoned = False  # given up for broken: stop() does not wait for it
        self._name = f"engine-{name}"
        self._done: threading.Event | None = None  # set once the thread's work has ended

    def start(self) -> Future[L]:
        self._done = hosts.run(self._name, self._serve)
        return self.ready

    @property
    def _ended(self) -> bool:
        return self._done is not None and self._done.is_set()

    def submit(self, work: W) -> None:
        self._inbox.put(Submit(work))

    def cancel(self, key: str) -> None:
        self._inbox.put(Cancel(key))

    def ask(self, control: Control[S, R]) -> Future[R]:
        """``control.answer(scheduler)`` between ticks; a future of the answer."""
        future: Future[R] = self._pending.track(Future())
        if not future.done():
            self._inbox.put(_Asked(control, future))
        return future

    def fault(self, stall_timeout_s: float = 0.0) -> str:
        """Why the thread no longer serves (stalled: past ``stall_timeout_s`` > 0); "" if it does."""
        if self.died:
            return f"its engine thread died: {self.died}"
        if self._serving and not self._stopping and self._ended:
            return "its engine thread ended"
        stalled = self.heartbeat.stalled_for()
        if 0 < stall_timeout_s < stalled:
            return f"its engine thread made no progress for {stalled:.1f}s with work pending"
        return ""

    def give_up(self, error: EngineDead) -> None:
        """Event loop: fails every call waiting on the thread, and any made later."""
        self._abandoned = True
        self._pending.fail_all(error)

    def stop_requested(self, key: str) -> bool:
        """Engine thread: a Cancel of ``key`` or a Shutdown is waiting (messages read
        ahead are handled in order at the next drain)."""
        while True:
            try:
                self._early.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        return any(isinstance(m, Shutdown) or (isinstance(m, Cancel) and m.key == key)
                   for m in self._early)

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stopping = True
        self._inbox.put(Shutdown())
        if self._done is not None and not self._abandoned:
            self._done.wait(timeout)

    def _serve(self) -> None:
        self.heartbeat.bind()
        try:
            self._serve_bound()
        finally:
            self.heartbeat.unbind()

    def _serve_bound(self) -> None:
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

    def _loop(self, scheduler: S) -> None:
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

    def _die(self, scheduler: S, exc: BaseException) -> None:
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
                    item.work.finish(FinishReason.ERROR, error=message)
                except BaseException:
                    log.exception("could not fail a request of a dead engine thread")

    def _drain(self, scheduler: S) -> bool:
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
                scheduler.submit(message.work)
            elif isinstance(message, Cancel):
                scheduler.cancel(message.key)
            elif isinstance(message, _Asked):
                settle(message.future, lambda: message.control.answer(scheduler))
