"""Images in a chat prompt, checked before any pixel is decoded, then decoded.

Invariants: every failure is ``InvalidRequest`` naming the part's API field path
(``chat.messages[i].parts[j].image.data``); the count and byte limits are checked before
a file is opened, the media type against the file's signature, and the pixel count from
the header alone (Pillow opens lazily), so a decompression bomb is refused unread. The
limits are ``engine.validation.Limits``' image fields.
"""

from __future__ import annotations

import io
from typing import Iterator

from ..errors import InvalidRequest
from ..requests import ChatPrompt, ImagePart

MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")


def media_type_of(data: bytes) -> str | None:
    """The media type the file's signature says, or None for none of the four."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    return None


def image_parts(prompt: ChatPrompt) -> Iterator[tuple[str, ImagePart]]:
    """Each image of ``prompt`` with its field path, in prompt order."""
    for i, message in enumerate(prompt.messages):
        for j, part in enumerate(message.parts):
            if isinstance(part, ImagePart):
                yield f"chat.messages[{i}].parts[{j}].image", part


def check_images(prompt: ChatPrompt, limits) -> None:
    """Count, sizes, media types and header dimensions; no pixel is decoded."""
    images = list(image_parts(prompt))
    if len(images) > limits.max_images:
        raise InvalidRequest("chat.messages", f"at most {limits.max_images} images per request, got {len(images)}")
    for field, part in images:
        check_image(field, part, limits)


def check_image(field: str, part: ImagePart, limits) -> None:
    if part.media_type not in MEDIA_TYPES:
        raise InvalidRequest(f"{field}.media_type", f"must be one of {', '.join(MEDIA_TYPES)}")
    if not part.data:
        raise InvalidRequest(f"{field}.data", "is empty")
    if len(part.data) > limits.max_image_bytes:
        raise InvalidRequest(f"{field}.data", f"at most {limits.max_image_bytes} bytes, got {len(part.data)}")
    sniffed = media_type_of(part.data)
    if sniffed != part.media_type:
        raise InvalidRequest(f"{field}.media_type", f"is {part.media_type} but the data is "
                                                    f"{sniffed or 'not a PNG, JPEG, WebP or GIF file'}")
    width, height = _header_size(f"{field}.data", part.data)
    if width * height > limits.max_image_pixels:
        raise InvalidRequest(f"{field}.data", f"{width}x{height} pixels; at most {limits.max_image_pixels} "
                                              "pixels per image")


def _header_size(field: str, data: bytes) -> tuple[int, int]:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:  # lazy: the header only
            width, height = image.size
    except Image.DecompressionBombError as exc:  # Pillow's own, larger bound, from the header too
        raise InvalidRequest(field, f"has too many pixels: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any unreadable header is the caller's input
        raise InvalidRequest(field, f"is not a readable image: {exc}") from None
    if width < 1 or height < 1:
        raise InvalidRequest(field, f"has no pixels ({width}x{height})")
    return width, height


def decode(field: str, part: ImagePart, limits):
    """The image as RGB pixels (a PIL image); its header already passed ``check_image``."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(part.data)) as image:
            if image.width * image.height > limits.max_image_pixels:
                raise InvalidRequest(field, "too many pixels")
            image.load()  # every byte: a truncated file fails here
            return image.convert("RGB")
    except InvalidRequest:
        raise
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt data is the caller's input
        raise InvalidRequest(field, f"could not be decoded: {exc}") from None
