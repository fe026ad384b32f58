"""Audio files in a chat prompt: checked from their headers before any sample is decoded
(Transcribe's checks: ``speech.audio``), then decoded to 16 kHz mono as mlx-vlm's
``load_audio`` reads them (the file's own rate, channels averaged, then resampled).

Invariants: every failure is ``InvalidRequest`` naming the part's API field path
(``chat.messages[i].parts[j].audio.data``); the count is checked before any file is
opened, each file's bytes, media type and header duration before it is decoded, so a
header claiming hours is refused undecoded; a file that decodes shorter than its header
states is refused, never heard shorter.
"""

from __future__ import annotations

import io
from typing import Iterator

import numpy as np

from ..errors import InvalidRequest
from ..requests import AudioPart, ChatPrompt
from ..speech.audio import SAMPLE_RATE, SHORT_SLACK_S, check_audio


def audio_parts(prompt: ChatPrompt) -> Iterator[tuple[str, AudioPart]]:
    """Each audio file of ``prompt`` with its field path, in prompt order."""
    for i, message in enumerate(prompt.messages):
        for j, part in enumerate(message.parts):
            if isinstance(part, AudioPart):
                yield f"chat.messages[{i}].parts[{j}].audio", part


def check_audios(prompt: ChatPrompt, limits) -> None:
    """Count, sizes, media types and the headers' durations; nothing decoded."""
    parts = list(audio_parts(prompt))
    if len(parts) > limits.max_audios:
        raise InvalidRequest("chat.messages", f"at most {limits.max_audios} audio files per request, got {len(parts)}")
    for field, part in parts:
        check_audio(field, part, limits)


def decode_audio(field: str, part: AudioPart, limits) -> np.ndarray:
    """[samples] float32 at 16 kHz, mono (blocking)."""
    from mlx_audio.audio_io import read
    from mlx_audio.utils import resample_audio

    header = check_audio(field, part, limits)
    data = f"{field}.data"
    try:
        samples, rate = read(io.BytesIO(part.data), dtype="float32")
    except Exception as exc:  # noqa: BLE001 - corrupt data is the caller's input
        raise InvalidRequest(data, f"could not be decoded: {exc}") from None
    samples = np.asarray(samples, dtype=np.float32)
    if samples.ndim > 1:
        samples = samples.mean(axis=1)
    if len(samples) < (header.seconds - SHORT_SLACK_S) * rate:
        raise InvalidRequest(data, f"could not be decoded: {len(samples) / rate:.2f} seconds of the "
                                   f"{header.seconds:.2f} its header states (a truncated file?)")
    if rate != SAMPLE_RATE:
        samples = resample_audio(samples, rate, SAMPLE_RATE)
    return np.asarray(samples, dtype=np.float32)
