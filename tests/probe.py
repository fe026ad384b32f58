"""A test's way onto a generation engine's thread: ``probe(engine, fn)`` runs ``fn(scheduler)``
between ticks, through the engine's public ``control``."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from engine.serving.protocol import Control


@dataclass(frozen=True)
class Probe(Control[Any, Any]):
    fn: Callable[[Any], Any]

    def answer(self, scheduler: Any) -> Any:
        return self.fn(scheduler)


def probe(engine, fn: Callable[[Any], Any]) -> Future:
    return engine.control(Probe(fn))
