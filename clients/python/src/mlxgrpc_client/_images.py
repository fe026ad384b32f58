"""Image parts of chat messages: encoded bytes and their media type, read from the
file's signature (PNG, JPEG, WebP, GIF); the server checks and decodes them."""

from __future__ import annotations

import os
from typing import Union

from . import pb

ImageSource = Union[bytes, bytearray, memoryview, str, os.PathLike]


def sniff_media_type(data: bytes) -> str:
    """``image/png``, ``image/jpeg``, ``image/webp`` or ``image/gif`` from the signature;
    ValueError for anything else."""
    head = bytes(data[:12])
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    raise ValueError("not a PNG, JPEG, WebP or GIF image")


def image_part(source: ImageSource, media_type: str | None = None) -> pb.ContentPart:
    """A ``ContentPart`` holding an image: ``source`` is the encoded bytes or a file's path;
    ``media_type`` defaults to what the bytes' signature says."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            data = f.read()
    else:
        data = bytes(source)
    return pb.ContentPart(image=pb.Image(data=data, media_type=media_type or sniff_media_type(data)))
