"""One model's place in the residency: its spec, state, engine, leases and load progress.

Invariants: ``state`` moves unloaded -> loading -> ready -> unloading -> unloaded (or the
slot is dropped); only a ready slot has an engine in the model set; ``leases`` counts the
calls using its engine now; a load's progress is replayed to every late subscriber.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from .catalog import ModelSpec

LOADING, READY, UNLOADING, UNLOADED = "loading", "ready", "unloading", "unloaded"
STAGES = ("resolving", "planning", "reading", "converting", "warming", "serving")
READ_BYTES_PER_S = 400e6  # a first guess of a load's pace, before the model has loaded once
WARM_S = 2.0


@dataclass(frozen=True)
class LoadProgress:
    stage: str
    done: int = 0
    total: int = 0
    evicted: tuple[str, ...] = ()
    engine: Any = None  # at "serving"
    elapsed_s: float = 0.0


@dataclass
class Slot:
    spec: ModelSpec
    state: str = UNLOADED
    engine: Any = None
    leases: int = 0
    waiting: int = 0  # requests waiting for its load: it is theirs as soon as it is ready
    last_used: float = field(default_factory=time.monotonic)
    keep_alive_s: float | None = None  # the latest request's (or the spec's)
    planned_bytes: int = 0  # judged from the files before loading
    resident_bytes: int = 0  # measured once loaded
    load_seconds: float = 0.0
    load_task: asyncio.Task | None = None
    load_started: float = 0.0
    unload_task: asyncio.Task | None = None
    expiry: asyncio.TimerHandle | None = None
    progress: list[LoadProgress] = field(default_factory=list)
    listeners: list[asyncio.Queue] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.keep_alive_s = self.spec.keep_alive_s

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def held_bytes(self) -> int:
        """Bytes the limit counts: measured when loaded, else as planned (0 when unloaded)."""
        if self.state == UNLOADED:
            return 0
        return self.resident_bytes or self.planned_bytes

    def expected_load_s(self) -> float:
        """Seconds a load of this model is expected to take (its last load, else from its size)."""
        guess = self.load_seconds or (self.planned_bytes / READ_BYTES_PER_S + WARM_S)
        if self.state == LOADING:
            guess -= time.monotonic() - self.load_started
        return max(0.5, guess)

    def publish(self, event: LoadProgress) -> None:
        self.progress.append(event)
        for queue in self.listeners:
            queue.put_nowait(event)

    def subscribe(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        for event in self.progress:
            queue.put_nowait(event)
        self.listeners.append(queue)
        return queue

    @property
    def in_use(self) -> bool:
        return bool(self.leases or self.waiting)

    def cancel_expiry(self) -> None:
        if self.expiry is not None:
            self.expiry.cancel()
            self.expiry = None
