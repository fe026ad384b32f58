"""Audio for Transcribe: checked from its header before any sample is decoded, then decoded
to 16 kHz mono float32 as mlx-audio reads files (miniaudio: no FFmpeg needed).

Invariants: every failure is ``InvalidRequest`` naming the field (``audio.data``,
``audio.media_type``); the byte limit is checked before anything is parsed, the media type
against the file's signature, and the duration from the header (a WAV's data chunk over
its frame size; the others' stream info) against ``Limits.max_audio_seconds``, so a file
claiming ten hours is refused undecoded; a file that decodes to less than its header
states (cut short) is refused, never transcribed shorter.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidRequest
from .types import AudioInput

SAMPLE_RATE = 16000  # what Whisper-class models read
MEDIA_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg", "flac": "audio/flac", "ogg": "audio/ogg"}
SHORT_SLACK_S = 0.05  # decoded audio may end this much before its header's length (resampling edges)
_WAV_CHUNKS = 64  # chunks read before the data chunk, at most


def format_of(data: bytes) -> str | None:
    """The container the file's signature says (``MEDIA_TYPES``' keys), or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:4] == b"OggS":
        return "ogg"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


@dataclass(frozen=True)
class Header:
    seconds: float
    sample_rate: int
    channels: int


def check_audio(field: str, audio: AudioInput, limits) -> Header:
    """Bytes, media type and the header's duration; nothing decoded (blocking: MP3 is scanned)."""
    if audio.media_type not in MEDIA_TYPES.values():
        raise InvalidRequest(f"{field}.media_type", f"must be one of {', '.join(MEDIA_TYPES.values())}")
    data = f"{field}.data"
    if not audio.data:
        raise InvalidRequest(data, "is empty")
    if len(audio.data) > limits.max_audio_bytes:
        raise InvalidRequest(data, f"at most {limits.max_audio_bytes} bytes, got {len(audio.data)}")
    kind = format_of(audio.data)
    if kind is None or MEDIA_TYPES[kind] != audio.media_type:
        found = MEDIA_TYPES[kind] if kind else "not a WAV, MP3, FLAC or Ogg file"
        raise InvalidRequest(f"{field}.media_type", f"is {audio.media_type} but the data is {found}")
    header = _wav_header(data, audio.data) if kind == "wav" else _stream_info(data, kind, audio.data)
    if not header.seconds > 0:
        raise InvalidRequest(data, "holds no audio")
    if header.seconds > limits.max_audio_seconds:
        raise InvalidRequest(data, f"{header.seconds:.1f} seconds; at most {limits.max_audio_seconds:g} seconds "
                                   "per audio file")
    return header


def _wav_header(field: str, data: bytes) -> Header:
    at, fmt = 12, None
    for _ in range(_WAV_CHUNKS):
        if at + 8 > len(data):
            break
        kind, size = data[at:at + 4], struct.unpack_from("<I", data, at + 4)[0]
        if kind == b"fmt " and size >= 16 and at + 24 <= len(data):
            fmt = struct.unpack_from("<HHIIHH", data, at + 8)
        elif kind == b"data":
            if fmt is None:
                raise InvalidRequest(field, "is a WAV file whose data comes before its format")
            _, channels, rate, _, block, bits = fmt
            if not (channels and rate and block):
                raise InvalidRequest(field, f"is a WAV file of {channels} channels at {rate} Hz")
            if size == 0xFFFFFFFF:  # written as a stream: the data runs to the file's end
                size = len(data) - at - 8
            return Header(size // block / rate, rate, channels)
        at += 8 + size + (size & 1)
    raise InvalidRequest(field, "is a WAV file without a readable format and data chunk")


def _stream_info(field: str, kind: str, data: bytes) -> Header:
    import miniaudio

    read = {"mp3": miniaudio.mp3_get_info, "flac": miniaudio.flac_get_info, "ogg": miniaudio.vorbis_get_info}[kind]
    try:
        info = read(data)
    except Exception as exc:  # noqa: BLE001 - an unreadable stream is the caller's input
        raise InvalidRequest(field, f"is not a readable {kind.upper()} file: {exc}") from None
    return Header(float(info.duration), int(info.sample_rate), int(info.nchannels))


def decode(field: str, audio: AudioInput, limits, header: Header | None = None) -> np.ndarray:
    """[samples] float32 at 16 kHz, mono (blocking): the whole file, as mlx-audio reads it;
    ``header``: what ``check_audio`` already found (checked here otherwise)."""
    from mlx_audio.audio_io import read

    header = header or check_audio(field, audio, limits)
    data = f"{field}.data"
    try:
        samples, _ = read(io.BytesIO(audio.data), dtype="float32", sample_rate=SAMPLE_RATE, nchannels=1)
    except Exception as exc:  # noqa: BLE001 - corrupt data is the caller's input
        raise InvalidRequest(data, f"could not be decoded: {exc}") from None
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    if len(samples) < (header.seconds - SHORT_SLACK_S) * SAMPLE_RATE:
        raise InvalidRequest(data, f"could not be decoded: {len(samples) / SAMPLE_RATE:.2f} seconds of the "
                                   f"{header.seconds:.2f} its header states (a truncated file?)")
    return samples
