"""Transcribe's messages to the engine's speech types and back."""

from __future__ import annotations

import uuid
from typing import Iterator

from engine.errors import InvalidRequest
from engine.speech.types import AudioInput, Transcript, TranscriptionRequest, TranscriptionStarted, TranscriptionTask
from engine.tenancy import ANONYMOUS, Tenant

from .gen.mlxgrpc.v1 import speech_pb2 as spb

_TASKS = {spb.TRANSCRIPTION_TASK_UNSPECIFIED: TranscriptionTask.TRANSCRIBE,
          spb.TRANSCRIPTION_TASK_TRANSCRIBE: TranscriptionTask.TRANSCRIBE,
          spb.TRANSCRIPTION_TASK_TRANSLATE: TranscriptionTask.TRANSLATE}


def transcription_request(msg: spb.TranscribeRequest, tenant: Tenant = ANONYMOUS) -> TranscriptionRequest:
    if msg.task not in _TASKS:
        raise InvalidRequest("task", "must be TRANSCRIPTION_TASK_TRANSCRIBE or TRANSCRIPTION_TASK_TRANSLATE")
    if not msg.HasField("audio"):
        raise InvalidRequest("audio", "is required")
    return TranscriptionRequest(AudioInput(msg.audio.data, msg.audio.media_type), language=msg.language.lower(),
                                task=_TASKS[msg.task], prompt=msg.prompt,
                                request_id=msg.request_id or uuid.uuid4().hex, tenant=tenant, priority=msg.priority)


def responses(event: TranscriptionStarted | Transcript, model: str) -> Iterator[spb.TranscribeResponse]:
    """The stream's messages for one engine event: ``started``, or every segment then ``finished``."""
    if isinstance(event, TranscriptionStarted):
        yield spb.TranscribeResponse(started=spb.TranscriptionStarted(
            request_id=event.request_id, model=model, audio_seconds=event.audio_seconds))
        return
    for s in event.segments:
        yield spb.TranscribeResponse(segment=spb.TranscriptSegment(
            index=s.index, start_seconds=s.start, end_seconds=s.end, text=s.text, token_ids=s.token_ids,
            avg_logprob=s.avg_logprob, no_speech_prob=s.no_speech_prob, compression_ratio=s.compression_ratio))
    yield spb.TranscribeResponse(finished=spb.TranscriptionFinished(
        text=event.text, language=event.language, segments=len(event.segments), seconds=event.seconds))
