"""Videos in chat messages against a live server's model named "video" (the fixture
server serves a tiny random Qwen2.5-VL; the default server never has one, so these skip
there, also with MLXGRPC_REQUIRE_LIVE=1)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from mlxgrpc_client import error_details, pb, video_part

CLIP = Path(__file__).resolve().parents[2] / "testdata" / "clip.mp4"  # 3 seconds of MPEG-4
QUESTION = "What happens in the video?"


@pytest.fixture(scope="module")
def video_model(models) -> pb.ModelInfo:
    found = [m for m in models if m.name == "video"]
    if not found:
        pytest.skip("the server has no model named 'video' (the fixture server serves one; the default never does)")
    return found[0]


def ask(part: pb.ContentPart) -> list[dict]:
    return [{"role": "user", "parts": [part, QUESTION]}]


def test_the_video_model_says_it_takes_videos(client, video_model):
    assert client.model_info("video").capabilities.media.video
    assert not client.model_info("vision").capabilities.media.video  # images only


def test_a_video_streams_an_answer(client, video_model):
    result = client.generate(ask(video_part(CLIP)), model="video", max_tokens=4).collect()
    assert len(result.token_ids) >= 1 and result.finish_reason == pb.FINISH_REASON_LENGTH
    text_only = client.generate([{"role": "user", "parts": [QUESTION]}], model="video", max_tokens=4).collect()
    # the frames' run of positions is part of the prompt: <|vision_start|>, a token or more per pair of the
    # 6 frames sampled (3 seconds at 2 per second), <|vision_end|> (the fixture's tiny processor: 1 a pair)
    assert result.prompt_tokens >= text_only.prompt_tokens + 5


def test_bytes_that_are_not_the_declared_type_are_invalid(client, video_model):
    with pytest.raises(grpc.RpcError) as caught:
        client.generate(ask(video_part(CLIP.read_bytes(), "video/webm")), model="video", max_tokens=4).collect()
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert any(v.field.endswith(".video.media_type") for v in details.field_violations)


def test_a_video_to_an_image_model_is_failed_precondition(client, video_model):
    with pytest.raises(grpc.RpcError) as caught:
        client.generate(ask(video_part(CLIP)), model="vision", max_tokens=4).collect()
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.FAILED_PRECONDITION and details.reason == "UNSUPPORTED_OPERATION"
