"""Images in chat messages against a live server's model named "vision" (the fixture
server serves a tiny random LLaVA; the default server never has one, so these skip
there, also with MLXGRPC_REQUIRE_LIVE=1)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from mlxgrpc_client import error_details, image_part, pb

IMAGE = Path(__file__).resolve().parents[2] / "testdata" / "gradient.png"


@pytest.fixture(scope="module")
def vision_model(models) -> pb.ModelInfo:
    found = [m for m in models if m.name == "vision"]
    if not found:
        pytest.skip("the server has no model named 'vision' (the fixture server serves one; the default never does)")
    return found[0]


def ask(part: pb.ContentPart) -> list[dict]:
    return [{"role": "user", "parts": [part, "Describe the image."]}]


def test_the_vision_model_says_it_takes_images(vision_model):
    assert vision_model.capabilities.media.input == pb.MEDIA_INPUT_EMBEDDINGS


def test_an_image_streams_an_answer(client, vision_model):
    result = client.generate(ask(image_part(IMAGE)), model="vision", max_tokens=4).collect()
    assert len(result.token_ids) >= 1 and result.finish_reason == pb.FINISH_REASON_LENGTH
    assert result.prompt_tokens > 16  # the image's run of positions is part of the prompt


def test_an_image_to_a_text_model_is_failed_precondition(client, vision_model):
    with pytest.raises(grpc.RpcError) as caught:
        client.generate(ask(image_part(IMAGE)), model="llama", max_tokens=4).collect()
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.FAILED_PRECONDITION and details.reason == "UNSUPPORTED_OPERATION"


def test_bytes_that_are_not_the_declared_type_are_invalid(client, vision_model):
    with pytest.raises(grpc.RpcError) as caught:
        client.generate(ask(image_part(IMAGE.read_bytes(), "image/jpeg")), model="vision", max_tokens=4).collect()
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert any(v.field.endswith(".image.data") or v.field.endswith(".image.media_type") for v in details.field_violations)
