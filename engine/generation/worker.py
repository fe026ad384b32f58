"""The engine thread: owns a model, its caches, its sequences and all MLX work for it.

The asyncio side talks to it only through typed messages on a thread-safe inbox;
events leave through each sequence's delivery sink (which hands them to the event
loop with ``call_soon_threadsafe``). The model is loaded on this thread, so every
MLX array of the model lives and is used here.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

log = logging.getLogger("engine.generation.worker")
T = TypeVar("T")


@dataclass(frozen=True)
class Submit:
    """A new sequence for the waiting queue."""

    sequence: object


@dataclass(frozen=True)
class Cancel:
    """End this request, whatever state it is in."""

    request_id: str


@dataclass(frozen=True)
class Call:
    """Runs ``fn(scheduler)`` between ticks and resolves ``future`` with the result."""

    fn: Callable[[object], object]
    future: Future


@dataclass(frozen=True)
class Shutdown:
    pass


class Worker(Generic[T]):
    """Runs ``load()`` then a loop of ``scheduler.tick()`` on its own thread.

    ``make_scheduler(loaded)`` builds the scheduler from the loaded state; it must
    provide ``idle``, ``submit(sequence)``, ``cancel(request_id)``, ``tick()``,
    ``fail_running(message)`` and ``shutdown(message)``.
    """

    def __init__(self, name: str, load: Callable[[], T], make_scheduler: Callable[[T], object]):
        self._load = load
        self._make_scheduler = make_scheduler
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._early: deque = deque()  # messages read ahead by ``stop_requested``, in order
        self.ready: Future[T] = Future()
        self._thread = threading.Thread(target=self._run, name=f"engine-{name}", daemon=True)

    def start(self) -> Future[T]:
        self._thread.start()
        return self.ready

    def submit(self, sequence: object) -> None:
        self._inbox.put(Submit(sequence))

    def cancel(self, request_id: str) -> None:
        self._inbox.put(Cancel(request_id))

    def call(self, fn: Callable[[object], object]) -> Future:
        """Runs ``fn(scheduler)`` between ticks; returns a future of its result."""
        future: Future = Future()
        self._inbox.put(Call(fn, future))
        return future

    def stop_requested(self, request_id: str) -> bool:
        """Engine thread only: whether a Cancel of ``request_id`` (or a Shutdown) is
        waiting. Messages read while looking are handled, in order, at the next drain."""
        while True:
            try:
                self._early.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        return any(isinstance(m, Shutdown) or (isinstance(m, Cancel) and m.request_id == request_id)
                   for m in self._early)

    def stop(self, timeout: float | None = 30.0) -> None:
        self._inbox.put(Shutdown())
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            loaded = self._load()
            scheduler = self._make_scheduler(loaded)
        except BaseException as exc:  # surfaced to whoever awaits readiness
            log.exception("model failed to load")
            self.ready.set_exception(exc)
            return
        self.ready.set_result(loaded)
        while True:
            if not self._drain(scheduler):
                scheduler.shutdown("server is shutting down")
                return
            try:
                scheduler.tick()
            except Exception as exc:  # noqa: BLE001 - one bad tick must not kill the thread
                log.exception("engine tick failed; failing running requests")
                scheduler.fail_running(f"engine failure: {type(exc).__name__}")

    def _drain(self, scheduler) -> bool:
        """Handles pending messages; blocks while idle. False means shut down."""
        while True:
            try:
                message = self._early.popleft() if self._early else self._inbox.get(block=scheduler.idle)
            except queue.Empty:
                return True
            if isinstance(message, Shutdown):
                return False
            if isinstance(message, Submit):
                scheduler.submit(message.sequence)
            elif isinstance(message, Cancel):
                scheduler.cancel(message.request_id)
            elif isinstance(message, Call):
                try:
                    message.future.set_result(message.fn(scheduler))
                except Exception as exc:  # noqa: BLE001
                    message.future.set_exception(exc)
