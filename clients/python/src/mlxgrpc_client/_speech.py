"""Transcribe's audio, its request and its answer as Python values: an encoded file's bytes
and their media type, read from the file's signature (WAV, FLAC, Ogg, MP3; the server checks
the header and decodes it to 16 kHz mono), the same audio as a chat message's part, and the
``Transcript`` a Transcribe stream's events make: the ``started`` event's request id, model
and audio length, every ``segment`` in time order, and ``finished``'s whole text and language."""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Iterable, Union

from . import pb

AudioSource = Union[bytes, bytearray, memoryview, str, os.PathLike]
#: What ``task=`` takes: ``"transcribe"`` (the speech as text in its own language, the
#: server's default), ``"translate"`` (into English; multilingual models only) or a
#: ``pb.TranscriptionTask``.
Task = Union[str, int]


def sniff_audio_media_type(data: bytes) -> str:
    """``audio/wav``, ``audio/flac``, ``audio/ogg`` or ``audio/mpeg`` from the signature (an
    MP3 file starts with an ID3 tag or an MPEG frame's sync bits); ValueError for anything else."""
    head = bytes(data[:12])
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head[:4] == b"fLaC":
        return "audio/flac"
    if head[:4] == b"OggS":
        return "audio/ogg"
    if head[:3] == b"ID3" or (len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "audio/mpeg"
    raise ValueError("not a WAV, FLAC, Ogg or MP3 audio file")


def audio(source: AudioSource, media_type: str | None = None) -> pb.Audio:
    """An ``Audio`` for Transcribe: ``source`` is the encoded file's bytes or its path;
    ``media_type`` defaults to what the bytes' signature says."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            data = f.read()
    else:
        data = bytes(source)
    return pb.Audio(data=data, media_type=media_type or sniff_audio_media_type(data))


def audio_part(source: AudioSource, media_type: str | None = None) -> pb.ContentPart:
    """A ``ContentPart`` holding an audio file, heard in place in a chat message by a model
    whose ``capabilities.media.audio`` is true: ``source`` and ``media_type`` as in :func:`audio`."""
    return pb.ContentPart(audio=audio(source, media_type))


def _task(value: Task) -> int:
    if isinstance(value, int):
        return value
    name = value.upper()
    try:
        return pb.TranscriptionTask.Value(name if name.startswith("TRANSCRIPTION_TASK_")
                                          else f"TRANSCRIPTION_TASK_{name}")
    except ValueError:
        choices = ", ".join(n.removeprefix("TRANSCRIPTION_TASK_").lower() for n in pb.TranscriptionTask.keys())
        raise ValueError(f"unknown transcription task {value!r} (one of {choices})") from None


def transcribe_request(
    source: AudioSource | pb.Audio,
    *,
    model: str = "",
    language: str = "",
    task: Task | None = None,
    prompt: str = "",
    request_id: str = "",
    priority: int = 0,
) -> pb.TranscribeRequest:
    """Builds a TranscribeRequest: ``source`` is a ``pb.Audio``, or a file's bytes or path
    (made into one by :func:`audio`, its media type sniffed), transcribed by a speech model
    (``model`` empty: the server's first). ``language`` is the spoken language's ISO 639-1
    code (empty: detected by a multilingual model, English for an English-only one);
    ``task`` is ``"transcribe"`` or ``"translate"`` (or a ``pb.TranscriptionTask``;
    ``None``: the server's default, transcribe); ``prompt`` is text the model reads first
    (names, vocabulary, spelling); ``priority`` as in :func:`generate_request`. An empty
    ``request_id`` gets a random one here, so the Cancel RPC can address the request before
    its ``started`` event arrives."""
    req = pb.TranscribeRequest(
        model=model,
        audio=source if isinstance(source, pb.Audio) else audio(source),
        language=language,
        prompt=prompt,
        request_id=request_id or uuid.uuid4().hex,
        priority=priority,
    )
    if task is not None:
        req.task = _task(task)
    return req


@dataclasses.dataclass(frozen=True)
class Segment:
    """A piece of the transcript, as the model timed it (a ``pb.TranscriptSegment``)."""

    index: int  # its position among the segments, from 0
    start_seconds: float  # where it starts in the audio
    end_seconds: float  # where it ends in the audio
    text: str
    token_ids: tuple[int, ...]  # the tokens the model wrote for it (text and timestamp tokens)
    avg_logprob: float  # the mean log probability of its tokens
    no_speech_prob: float  # the model's probability that its window holds no speech
    compression_ratio: float  # its text's gzip compression ratio (high: repetitive)

    @classmethod
    def of(cls, segment: pb.TranscriptSegment) -> Segment:
        return cls(segment.index, segment.start_seconds, segment.end_seconds, segment.text,
                   tuple(segment.token_ids), segment.avg_logprob, segment.no_speech_prob, segment.compression_ratio)


@dataclasses.dataclass
class Transcript:
    """What a Transcribe stream produced, gathered from its events: ``started``'s
    ``request_id``, ``model`` and ``audio_seconds``; the ``segments`` in time order; and
    ``finished``'s whole ``text``, ``language`` (the request's or the one detected),
    ``segment_count`` (segments sent) and ``seconds`` (from admission to the transcript)."""

    request_id: str = ""
    model: str = ""
    audio_seconds: float = 0.0
    segments: list[Segment] = dataclasses.field(default_factory=list)
    #: The whole transcript (every segment's text), from the ``finished`` event.
    text: str = ""
    language: str = ""
    segment_count: int = 0
    seconds: float = 0.0
    #: The ``finished`` event; ``None`` when the stream ended without one (cancelled client-side).
    finished: pb.TranscriptionFinished | None = None

    @classmethod
    def of(cls, events: Iterable[pb.TranscribeResponse]) -> Transcript:
        """The transcript of a whole stream's events (e.g. from the raw stub)."""
        transcript = cls()
        for event in events:
            transcript._add(event)
        return transcript

    def _add(self, event: pb.TranscribeResponse) -> None:
        kind = event.WhichOneof("event")
        if kind == "started":
            self.request_id = event.started.request_id
            self.model = event.started.model
            self.audio_seconds = event.started.audio_seconds
        elif kind == "segment":
            self.segments.append(Segment.of(event.segment))
        elif kind == "finished":
            self.finished = event.finished
            self.text = event.finished.text
            self.language = event.finished.language
            self.segment_count = event.finished.segments
            self.seconds = event.finished.seconds
