"""The OS threads engine threads run on, each kept for the next engine once its engine ends.

MLX's CPU stream worker and the BLAS's OpenMP team belong to the thread that first computes,
and outlive it: a new OS thread per model would leave native threads behind on every
load/unload cycle. A host runs one engine at a time, waits for its MLX work after each, and
releases its streams (``end_thread``, which MLX needs before the interpreter exits) only when
the process stops it.
"""

from __future__ import annotations

import atexit
import itertools
import queue
import threading
from typing import Callable

import mlx.core as mx

from ..hardware.device import end_thread

IDLE_NAME = "engine-idle"
_lock = threading.Lock()
_idle: list[_Host] = []
_numbers = itertools.count()


class _Host:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"{IDLE_NAME}-{next(_numbers)}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        me = threading.current_thread()
        while (job := self.jobs.get()) is not None:
            name, run, done = job
            me.name = name
            try:
                run()
            finally:
                try:
                    mx.synchronize()  # nothing of this engine's runs on after it
                except RuntimeError:  # a failure of the engine's own work, reported to it already
                    pass
                me.name = IDLE_NAME
                with _lock:
                    _idle.append(self)
                done.set()
        end_thread()


def run(name: str, work: Callable[[], None]) -> threading.Event:
    """Runs ``work`` on an idle host (a new one if none is idle), its thread named ``name``;
    the event is set once ``work`` has returned."""
    done = threading.Event()
    with _lock:
        host = _idle.pop() if _idle else None
    (host or _Host()).jobs.put((name, work, done))
    return done


def stop_idle(timeout: float = 5.0) -> int:
    """Ends every idle host (each releases its MLX streams as it goes); how many ended."""
    with _lock:
        hosts, _idle[:] = list(_idle), []
    for host in hosts:
        host.jobs.put(None)
    for host in hosts:
        host.thread.join(timeout)
    return len(hosts)


atexit.register(stop_idle)
