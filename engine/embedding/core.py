"""The embedding engine's side of the shared engine thread: the loaded model, and each
batch's forward arriving as a ``Forward`` control (the thread runs them in arrival order;
there is nothing to tick between them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..events import FinishReason
from ..serving.protocol import Control
from .pooling import EmbeddingModel


class EmbeddingCore:
    """What ``EngineThread`` drives for an embedding model: controls only, never a tick's work."""

    def __init__(self, model: EmbeddingModel):
        self.model = model

    @property
    def idle(self) -> bool:
        return True

    def submit(self, work: Any) -> None:
        raise TypeError("an embedding engine takes its work as controls")

    def cancel(self, key: str) -> bool:
        return False  # a batch runs to its end; its callers' cancellation is the event loop's

    def tick(self) -> None:
        pass

    def fail_running(self, message: str) -> None:
        pass

    def shutdown(self, message: str, reason: FinishReason = FinishReason.CANCELLED) -> None:
        pass


@dataclass(frozen=True)
class Forward(Control[EmbeddingCore, Any]):
    """One batch's work on the engine thread."""

    run: Callable[[], Any]

    def answer(self, scheduler: EmbeddingCore) -> Any:
        return self.run()
