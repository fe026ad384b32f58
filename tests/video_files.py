"""Small video files for the video tests, written by OpenCV's FFmpeg (MPEG-4 Part 2 in
MP4, Motion JPEG in AVI), and hostile ones made by editing an AVI's header: a claimed
frame count, a claimed frame size, or a file cut short."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import numpy as np


def clip(frames: int = 12, size: tuple[int, int] = (96, 80), fps: float = 4.0, fourcc: str = "mp4v",
         suffix: str = ".mp4", shift: int = 0) -> bytes:
    """A moving bright square over a colour ramp; ``shift`` changes where it starts."""
    import cv2

    width, height = size
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / f"clip{suffix}")
        writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*fourcc), fps, size)
        for i in range(frames):
            frame = np.zeros((height, width, 3), np.uint8)
            frame[:, :, 0] = (i * 20) % 256
            frame[:, :, 2] = (np.arange(width) * 255 // max(1, width - 1))[None, :]
            x = (shift + i * 6) % max(1, width - 12)
            frame[height // 8 : height // 8 + height // 4, x : x + 12] = 255
            writer.write(frame)
        writer.release()
        return Path(path).read_bytes()


def avi(frames: int = 8, size: tuple[int, int] = (32, 24), fps: float = 4.0) -> bytes:
    return clip(frames, size, fps, "MJPG", ".avi")


def _chunk(data: bytes, tag: bytes) -> int:
    at = data.find(tag)
    assert at >= 0, tag
    return at + 8  # the chunk's body


def claiming_frames(data: bytes, frames: int) -> bytes:
    """An AVI whose main and stream headers claim ``frames`` frames."""
    out = bytearray(data)
    struct.pack_into("<I", out, _chunk(data, b"avih") + 16, frames)  # dwTotalFrames
    struct.pack_into("<I", out, _chunk(data, b"strh") + 32, frames)  # dwLength
    return bytes(out)


def truncated(data: bytes, fraction: float = 0.9) -> bytes:
    return data[: int(len(data) * fraction)]
