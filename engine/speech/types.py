"""Plain types of Transcribe (no MLX): the request, its audio, and what comes back."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..tenancy import ANONYMOUS, Tenant


@dataclass(frozen=True)
class AudioInput:
    """An encoded audio file (WAV, MP3, FLAC or Ogg Vorbis) as the client sent it."""

    data: bytes
    media_type: str


class TranscriptionTask(enum.Enum):
    TRANSCRIBE = "transcribe"  # the speech's own language
    TRANSLATE = "translate"  # into English


@dataclass(frozen=True)
class TranscriptionRequest:
    audio: AudioInput
    language: str = ""  # ISO 639-1; "": detected (multilingual models) or English
    task: TranscriptionTask = TranscriptionTask.TRANSCRIBE
    prompt: str = ""  # text before the first window: vocabulary, spelling, style
    request_id: str = ""
    tenant: Tenant = ANONYMOUS
    priority: int = 0


@dataclass(frozen=True)
class Segment:
    index: int
    start: float  # seconds from the audio's start
    end: float
    text: str
    token_ids: tuple[int, ...]
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float


@dataclass(frozen=True)
class TranscriptionStarted:
    """The request was admitted and its audio decoded."""

    request_id: str
    audio_seconds: float


@dataclass(frozen=True)
class Transcript:
    language: str
    text: str
    segments: tuple[Segment, ...]
    audio_seconds: float
    seconds: float = 0.0  # from admission to the transcript
