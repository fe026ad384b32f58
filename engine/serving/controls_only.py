"""The engine-thread side of a model whose work all arrives as controls (embedding and
speech models): the loaded model, and each piece of work a ``Run`` control, run in arrival
order; there is nothing to tick between them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from ..events import FinishReason
from .protocol import Control

M = TypeVar("M")


class ControlsOnly(Generic[M]):
    """What ``EngineThread`` drives for such a model: controls only, never a tick's work."""

    def __init__(self, model: M):
        self.model = model

    @property
    def idle(self) -> bool:
        return True

    def submit(self, work: Any) -> None:
        raise TypeError("this engine takes its work as controls")

    def cancel(self, key: str) -> bool:
        return False  # a piece of work runs to its end; its callers' cancellation is the event loop's

    def tick(self) -> None:
        pass

    def fail_running(self, message: str) -> None:
        pass

    def shutdown(self, message: str, reason: FinishReason = FinishReason.CANCELLED) -> None:
        pass


@dataclass(frozen=True)
class Run(Control[ControlsOnly[Any], Any]):
    """One piece of work on the engine thread (an embedding batch's forward, a transcription)."""

    run: Callable[[], Any]

    def answer(self, scheduler: ControlsOnly[Any]) -> Any:
        return self.run()
