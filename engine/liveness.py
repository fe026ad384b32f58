"""Whether an engine's thread still serves, and ending its callers when it does not.

An engine thread is broken when it died (an exception escaped its loop) or stalled
(busy, with no new iteration for longer than the stall timeout). ``Breaker`` latches
the first fault it sees, on the event loop: from then on the engine is not ready,
new requests are refused with ``EngineDead``, and the engine's fan-out ends every
caller waiting on the thread (streams, futures of calls) without waiting on the
thread itself. A broken engine never becomes healthy again; the process restarts.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import Callable

from .errors import EngineDead

log = logging.getLogger("engine.liveness")


class Heartbeat:
    """The thread's sign of life: when its current iteration (or job) began; idle
    while it waits for work, which is no stall however long it lasts."""

    def __init__(self) -> None:
        self._at = time.monotonic()
        self._idle = True

    def beat(self) -> None:
        self._at = time.monotonic()
        self._idle = False

    def rest(self) -> None:
        self._idle = True

    def stalled_for(self) -> float:
        """Seconds the thread has been busy on its current iteration (0 while idle)."""
        return 0.0 if self._idle else time.monotonic() - self._at


def fail(future: Future, error: BaseException) -> None:
    """Fails ``future`` unless it is settled already."""
    try:
        future.set_exception(error)
    except InvalidStateError:
        pass


def settle(future: Future, fn: Callable[[], object]) -> None:
    """Resolves ``future`` with ``fn()`` (or its Exception); a future already failed by
    a fan-out stays as it is. BaseExceptions propagate."""
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
    """Futures of work handed to an engine thread and not settled yet (any thread).
    Once ``fail_all`` ran, futures tracked later fail at once."""

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
    """One engine's latch: ``detect(stall_timeout_s)`` says why its thread cannot serve
    ("" while it can); ``fan_out(error)`` ends everything waiting on it. Event loop only."""

    def __init__(self, name: Callable[[], str], detect: Callable[[float], str],
                 fan_out: Callable[[EngineDead], None]):
        self._name = name
        self._detect = detect
        self._fan_out = fan_out
        self.broken = ""  # the fault, once seen

    def check(self, stall_timeout_s: float = 0.0) -> str:
        """Why the engine is broken ("" while it is not; 0 s: stalls are not looked for).
        The first fault seen is latched and every waiting caller ended."""
        if not self.broken and (fault := self._detect(stall_timeout_s)):
            self.broken = fault
            log.critical("model %r is broken: %s; ending its callers", self._name(), fault)
            self._fan_out(self.error())
        return self.broken

    def error(self) -> EngineDead:
        return EngineDead(f"model {self._name()!r} is broken ({self.broken}); the server is restarting; "
                          "retry on another replica")

    def refuse(self) -> None:
        """Raises ``EngineDead`` when the engine is broken (its thread's death is seen here
        at once; a stall only by the watchdog, which knows the timeout)."""
        if self.check():
            raise self.error()
