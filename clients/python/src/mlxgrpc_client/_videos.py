"""Video parts of chat messages: an encoded file's bytes and their media type, read from
the container's signature (MP4, QuickTime, WebM, Matroska, AVI); the server checks the
container's header and samples frames from it."""

from __future__ import annotations

import os
from typing import Union

from . import pb

VideoSource = Union[bytes, bytearray, memoryview, str, os.PathLike]

_ISO_BOXES = (b"ftyp", b"moov", b"mdat", b"wide", b"free")  # an ISO base media file's first box
_EBML = b"\x1a\x45\xdf\xa3"


def sniff_video_media_type(data: bytes) -> str:
    """``video/mp4``, ``video/quicktime``, ``video/webm``, ``video/x-matroska`` or
    ``video/x-msvideo`` from the container's signature; ValueError for anything else."""
    head = bytes(data[:64])
    if head[4:8] in _ISO_BOXES:
        return "video/quicktime" if head[4:8] == b"ftyp" and head[8:12] == b"qt  " else "video/mp4"
    if head.startswith(_EBML):
        return "video/webm" if b"webm" in head else "video/x-matroska"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "video/x-msvideo"
    raise ValueError("not an MP4, QuickTime, WebM, Matroska or AVI video")


def video_part(source: VideoSource, media_type: str | None = None) -> pb.ContentPart:
    """A ``ContentPart`` holding a video: ``source`` is the encoded file's bytes or its path;
    ``media_type`` defaults to what the bytes' signature says."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            data = f.read()
    else:
        data = bytes(source)
    return pb.ContentPart(video=pb.Video(data=data, media_type=media_type or sniff_video_media_type(data)))
