"""Videos in a chat prompt: checked from the container's header before any frame is
decoded, then sampled and decoded as mlx-vlm's ``load_video`` samples them.

Invariants: every failure is ``InvalidRequest`` naming the part's API field path
(``chat.messages[i].parts[j].video.data``); the count and byte limits are checked before
the file is opened, the media type against the file's signature, and the frame count,
frame rate, duration and frame size from the header alone, so a video claiming hours of
frames or huge frames is refused undecoded. Frames are read through OpenCV's FFmpeg from
memory (no file is written), at the indices mlx-vlm picks for the model's sampling (its
fps, min and max frames, a multiple of the temporal patch), with at most
``Limits.max_video_frames`` frames and ``Limits.video_fps`` (0: the model's) frames per
second; a frame that cannot be read (a truncated file) refuses the request, never serves
a shorter video.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..errors import InvalidRequest
from ..requests import ChatPrompt, VideoPart

MEDIA_TYPES = ("video/mp4", "video/quicktime", "video/webm", "video/x-matroska", "video/x-msvideo")
# media types one container signature stands for
_FAMILIES = {"iso-bmff": ("video/mp4", "video/quicktime"), "matroska": ("video/webm", "video/x-matroska"),
             "avi": ("video/x-msvideo",)}
MAX_SOURCE_FPS = 240  # a header claiming more frames per second than this is refused


def container_of(data: bytes) -> str | None:
    """The container the file's signature says (``_FAMILIES``' keys), or None."""
    if data[4:8] in (b"ftyp", b"moov", b"mdat", b"wide", b"free"):
        return "iso-bmff"
    if data.startswith(b"\x1a\x45\xdf\xa3"):
        return "matroska"
    if data[:4] == b"RIFF" and data[8:12] == b"AVI ":
        return "avi"
    return None


def video_parts(prompt: ChatPrompt) -> Iterator[tuple[str, VideoPart]]:
    """Each video of ``prompt`` with its field path, in prompt order."""
    for i, message in enumerate(prompt.messages):
        for j, part in enumerate(message.parts):
            if isinstance(part, VideoPart):
                yield f"chat.messages[{i}].parts[{j}].video", part


@dataclass(frozen=True)
class Header:
    frames: int
    fps: float
    width: int
    height: int

    @property
    def seconds(self) -> float:
        return self.frames / self.fps


def check_videos(prompt: ChatPrompt, limits) -> None:
    """Count, sizes, media types and the header's frames, rate and size; nothing decoded."""
    videos = list(video_parts(prompt))
    if len(videos) > limits.max_videos:
        raise InvalidRequest("chat.messages", f"at most {limits.max_videos} videos per request, got {len(videos)}")
    for field, part in videos:
        check_video(field, part, limits)


def check_video(field: str, part: VideoPart, limits) -> Header:
    if part.media_type not in MEDIA_TYPES:
        raise InvalidRequest(f"{field}.media_type", f"must be one of {', '.join(MEDIA_TYPES)}")
    if not part.data:
        raise InvalidRequest(f"{field}.data", "is empty")
    if len(part.data) > limits.max_video_bytes:
        raise InvalidRequest(f"{field}.data", f"at most {limits.max_video_bytes} bytes, got {len(part.data)}")
    container = container_of(part.data)
    if container is None or part.media_type not in _FAMILIES[container]:
        found = "/".join(_FAMILIES[container]) if container else "not an MP4, QuickTime, WebM, Matroska or AVI file"
        raise InvalidRequest(f"{field}.media_type", f"is {part.media_type} but the data is {found}")
    with _opened(f"{field}.data", part.data) as cap:
        header = _header(f"{field}.data", cap)
    data = f"{field}.data"
    if header.width * header.height > limits.max_video_pixels:
        raise InvalidRequest(data, f"{header.width}x{header.height} pixels a frame; at most "
                                   f"{limits.max_video_pixels} pixels per frame")
    if header.seconds > limits.max_video_seconds:
        raise InvalidRequest(data, f"{header.seconds:.1f} seconds ({header.frames} frames at {header.fps:g} fps); "
                                   f"at most {limits.max_video_seconds} seconds per video")
    return header


class _opened:
    """An OpenCV capture reading ``data`` from memory, released on exit."""

    def __init__(self, field: str, data: bytes):
        import cv2

        self.stream = io.BytesIO(data)  # OpenCV reads it through the capture's life: held here
        try:
            self.cap = cv2.VideoCapture(self.stream, cv2.CAP_FFMPEG, [])  # type: ignore[call-overload]
        except Exception as exc:  # noqa: BLE001 - an unreadable container is the caller's input
            raise InvalidRequest(field, f"is not a readable video: {exc}") from None
        if not self.cap.isOpened():
            self.cap.release()
            raise InvalidRequest(field, "is not a readable video (no decodable video stream)")

    def __enter__(self):
        return self.cap

    def __exit__(self, *exc) -> None:
        self.cap.release()


def _header(field: str, cap) -> Header:
    import cv2

    frames, fps = cap.get(cv2.CAP_PROP_FRAME_COUNT), cap.get(cv2.CAP_PROP_FPS)
    width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    if not (frames >= 1 and math.isfinite(frames)):
        raise InvalidRequest(field, "has no frame count in its header")
    if not (0 < fps <= MAX_SOURCE_FPS):
        raise InvalidRequest(field, f"has a frame rate of {fps:g} in its header; 0 to {MAX_SOURCE_FPS} fps are served")
    if width < 1 or height < 1:
        raise InvalidRequest(field, f"has no pixels ({width}x{height})")
    return Header(int(frames), float(fps), width, height)


@dataclass(frozen=True)
class Sampling:
    """How a model samples a video (mlx-vlm's ``VideoSampling`` after its defaults)."""

    fps: float
    min_frames: int
    max_frames: int
    frame_factor: int  # frames come in multiples of this (the temporal patch)


def frame_indices(header: Header, sampling: Sampling) -> np.ndarray:
    """The source frames to decode, as mlx-vlm's ``load_video`` picks them."""
    ff = sampling.frame_factor
    lo = math.ceil(sampling.min_frames / ff) * ff
    hi = math.floor(min(sampling.max_frames, header.frames) / ff) * ff
    n = min(max(header.frames / header.fps * sampling.fps, lo), hi, header.frames)
    n = math.floor(n / ff) * ff
    if not ff <= n <= header.frames:
        raise ValueError(f"{header.frames} frames give {n} samples")
    return np.linspace(0, header.frames - 1, n).round().astype(int)


def decode(field: str, part: VideoPart, limits, sampling: Sampling) -> tuple[np.ndarray, np.ndarray]:
    """([frames, 3, height, width] uint8 RGB, each frame's time in seconds): the sampled
    frames (blocking work)."""
    import cv2

    data = f"{field}.data"
    header = check_video(field, part, limits)
    frames = min(sampling.max_frames, limits.max_video_frames)
    fps = limits.video_fps or sampling.fps
    try:
        indices = frame_indices(header, Sampling(fps, sampling.min_frames, frames, sampling.frame_factor))
    except ValueError:
        raise InvalidRequest(data, f"has {header.frames} frames; at least {sampling.frame_factor} are needed") \
            from None
    out = []
    with _opened(data, part.data) as cap:
        for index in indices:
            cap.set(cv2.CAP_PROP_POS_FRAMES, int(index))
            ok, frame = cap.read()
            if not ok or frame is None or frame.shape[:2] != (header.height, header.width):
                raise InvalidRequest(data, f"could not be decoded: frame {index} of the {header.frames} its header "
                                           "names is missing (a truncated file?)")
            out.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    return np.transpose(np.stack(out, axis=0), (0, 3, 1, 2)), indices / header.fps
