"""The image checks of engine/vision/images.py on their own: what each limit refuses,
naming which field, before anything is decoded; and decoding what passed."""

from __future__ import annotations

import pytest

from engine.errors import InvalidRequest
from engine.requests import ChatMessage, ChatPrompt, GenerationRequest, ImagePart, TextPart
from engine.validation import Limits, validate_request
from engine.vision.images import decode, media_type_of
from tests.vision_helpers import GRADIENT, encoded, png_claiming

FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP", "image/gif": "GIF"}


def chat(*parts) -> GenerationRequest:
    return GenerationRequest(ChatPrompt((ChatMessage("user", "", parts=(TextPart("look"), *parts)),)))


def refused(request: GenerationRequest, limits: Limits = Limits()) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as err:
        validate_request(request, 640, limits, 4096)
    return err.value


@pytest.mark.parametrize("media_type", FORMATS)
def test_each_media_type_passes_and_decodes(media_type):
    data = encoded((90, 120, 30), (40, 24), FORMATS[media_type])
    assert media_type_of(data) == media_type
    validate_request(chat(ImagePart(data, media_type)), 640, Limits(), 4096)
    image = decode("x", ImagePart(data, media_type), Limits())
    assert (image.mode, image.size) == ("RGB", (40, 24))


def test_fields_name_the_part_and_what_is_wrong():
    gradient = GRADIENT.read_bytes()
    assert refused(chat(ImagePart(gradient, "image/jpeg"))).field == "chat.messages[0].parts[1].image.media_type"
    assert refused(chat(ImagePart(gradient, "image/tiff"))).field == "chat.messages[0].parts[1].image.media_type"
    assert refused(chat(ImagePart(b"", "image/png"))).field == "chat.messages[0].parts[1].image.data"
    small = Limits(max_image_bytes=len(gradient) - 1)
    assert "bytes" in refused(chat(ImagePart(gradient, "image/png")), small).description
    err = refused(chat(*[ImagePart(gradient, "image/png")] * 3), Limits(max_images=2))
    assert (err.field, err.description) == ("chat.messages", "at most 2 images per request, got 3")


def test_pixels_are_counted_from_the_header():
    """A few hundred bytes claiming more pixels than allowed are refused; with the limit
    raised the same header passes and decoding finds the data missing."""
    claim = ImagePart(png_claiming(5000, 5000), "image/png")
    assert "5000x5000 pixels" in refused(chat(claim)).description
    wide = Limits(max_image_pixels=5000 * 5000)
    validate_request(chat(claim), 640, wide, 4096)
    with pytest.raises(InvalidRequest, match="could not be decoded"):
        decode("chat.messages[0].parts[1].image.data", claim, wide)
    bomb = refused(chat(ImagePart(png_claiming(30000, 30000), "image/png")))
    assert bomb.field == "chat.messages[0].parts[1].image.data" and "pixels" in bomb.description


def test_truncated_files_fail_decoding_not_the_header():
    part = ImagePart(GRADIENT.read_bytes()[:120], "image/png")
    validate_request(chat(part), 640, Limits(), 4096)  # the header is intact
    with pytest.raises(InvalidRequest) as err:
        decode("chat.messages[0].parts[1].image.data", part, Limits())
    assert err.value.field == "chat.messages[0].parts[1].image.data"
