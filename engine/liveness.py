"""Whether an engine's thread still serves (not dead, not stalled), and ending its callers when not.

Invariant: the first fault is latched; a broken engine refuses new work, ends every waiter
without waiting on the thread, and never becomes healthy again.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import Callable

from .errors import EngineDead

log = logging.getLogger("engine.liveness")


_bound = threading.local()  # the heartbeat of the engine thread running on this thread, if any


def still_working() -> None:
    """Engine-thread work that runs long (a video's tower, a transcription's windows) calls
    this between its pieces, so the watchdog sees progress rather than a stall; elsewhere
    it does nothing."""
    heartbeat = getattr(_bound, "heartbeat", None)
    if heartbeat is not None:
        heartbeat.beat()


class Heartbeat:
    """When the thread's current iteration began; waiting for work (idle) is never a stall."""

    def __init__(self) -> None:
        self._at = time.monotonic()
        self._idle = True

    def beat(self) -> None:
        self._at = time.monotonic()
        self._idle = False

    def rest(self) -> None:
        self._idle = True

    def bind(self) -> None:
        """``still_working`` on this thread beats this heartbeat until ``unbind``."""
        _bound.heartbeat = self

    @staticmethod
    def unbind() -> None:
        _bound.heartbeat = None

    def stalled_for(self) -> float:
        """Seconds busy on the current iteration (0 while idle)."""
        return 0.0 if self._idle else time.monotonic() - self._at


def fail(future: Future, error: BaseException) -> None:
    try:
        future.set_exception(error)
    except InvalidStateError:
        pass


def settle(future: Future, fn: Callable[[], object]) -> None:
    """Resolves ``future`` with ``fn()`` (or its Exception) unless already settled; BaseExceptions propagate."""
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - the caller's error, not the thread's
        fail(future, exc)
        return
    try:
        future.set_result(result)
    except InvalidStateError:
        pass


class Pending:
    """Unsettled futures of an engine thread's work (any thread); after ``fail_all`` new ones fail at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: set[Future] = set()
        self._error: EngineDead | None = None

    def __len__(self) -> int:
        return len(self._futures)

    def track(self, future: Future) -> Future:
        with self._lock:
            error = self._error
            if error is None:
                self._futures.add(future)
        if error is not None:
            fail(future, error)
        else:
            future.add_done_callback(self._discard)
        return future

    def fail_all(self, error: EngineDead) -> None:
        with self._lock:
            self._error = error
            futures, self._futures = self._futures, set()
        for future in futures:
            fail(future, error)

    def _discard(self, future: Future) -> None:
        with self._lock:
            self._futures.discard(future)


class Breaker:
    """One engine's fault latch; event loop only."""

    def __init__(self, name: Callable[[], str], detect: Callable[[float], str],
                 fan_out: Callable[[EngineDead], None]):
        self._name = name
        self._detect = detect
        self._fan_out = fan_out
        self.broken = ""  # the fault, once seen

    def check(self, stall_timeout_s: float = 0.0) -> str:
        """Why the engine is broken ("" while not; 0 s: no stall check); latches the first fault."""
        if not self.broken and (fault := self._detect(stall_timeout_s)):
            self.broken = fault
            log.critical("model %r is broken: %s; ending its callers", self._name(), fault)
            self._fan_out(self.error())
        return self.broken

    def error(self) -> EngineDead:
        return EngineDead(f"model {self._name()!r} is broken ({self.broken}); the server is restarting; "
                          "retry on another replica")

    def refuse(self) -> None:
        """Raises ``EngineDead`` when broken (stalls are seen only by the watchdog)."""

        if self.check():
            raise self.error()
