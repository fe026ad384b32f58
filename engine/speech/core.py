"""The speech engine's side of the shared engine thread: the loaded model, and each
transcription arriving as a ``Transcribe`` control (run in arrival order; nothing to tick)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..events import FinishReason
from ..serving.protocol import Control
from .model import SpeechModel


class SpeechCore:
    """What ``EngineThread`` drives for a speech model: controls only, never a tick's work."""

    def __init__(self, model: SpeechModel):
        self.model = model

    @property
    def idle(self) -> bool:
        return True

    def submit(self, work: Any) -> None:
        raise TypeError("a speech engine takes its work as controls")

    def cancel(self, key: str) -> bool:
        return False  # a transcription runs to its end; its caller's cancellation is the event loop's

    def tick(self) -> None:
        pass

    def fail_running(self, message: str) -> None:
        pass

    def shutdown(self, message: str, reason: FinishReason = FinishReason.CANCELLED) -> None:
        pass


@dataclass(frozen=True)
class Transcribe(Control[SpeechCore, Any]):
    """One transcription's work on the engine thread."""

    run: Callable[[], Any]

    def answer(self, scheduler: SpeechCore) -> Any:
        return self.run()
