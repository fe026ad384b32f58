"""Knobs of one speech model's engine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeechConfig:
    max_active: int = 1  # transcriptions running at once (each holds the engine thread while it runs)
    max_queued: int = 16  # transcriptions waiting for admission; more: RESOURCE_EXHAUSTED
    priority_aging_s: float = 5.0  # the server's --priority-aging
