"""Audio in chat messages against a live server's model named "omni" (the fixture server
serves a tiny random Qwen3-Omni, which hears audio and sees images; the default server never
has one, so these skip there, also with MLXGRPC_REQUIRE_LIVE=1)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from mlxgrpc_client import audio_part, error_details, image_part, pb

TESTDATA = Path(__file__).resolve().parents[2] / "testdata"
SPEECH = TESTDATA / "speech.wav"  # 2 seconds of 16 kHz WAV
QUESTION = "What is said?"


@pytest.fixture(scope="module")
def omni_model(models) -> pb.ModelInfo:
    found = [m for m in models if m.name == "omni"]
    if not found:
        pytest.skip("the server has no model named 'omni' (the fixture server serves one; the default never does)")
    return found[0]


def ask(*parts: pb.ContentPart | str) -> list[dict]:
    return [{"role": "user", "parts": [*parts, QUESTION]}]


def test_the_omni_model_says_it_takes_audio(client, omni_model):
    assert client.model_info("omni").capabilities.media.audio
    assert not client.model_info("vision").capabilities.media.audio  # images only


def test_an_audio_file_streams_an_answer(client, omni_model):
    result = client.generate(ask(audio_part(SPEECH)), model="omni", max_tokens=4).collect()
    assert len(result.token_ids) >= 1 and result.finish_reason == pb.FINISH_REASON_LENGTH
    text_only = client.generate(ask(), model="omni", max_tokens=4).collect()
    # the audio's tokens are part of the prompt: about 13 a second of audio, and its 2 markers
    assert result.prompt_tokens >= text_only.prompt_tokens + 2 * 13 + 2


def test_audio_then_an_image_then_text(client, omni_model):
    image = image_part(TESTDATA / "gradient.png")
    both = client.generate(ask(audio_part(SPEECH), image), model="omni", max_tokens=4).collect()
    image_only = client.generate(ask(image), model="omni", max_tokens=4).collect()
    assert len(both.token_ids) >= 1
    assert both.prompt_tokens >= image_only.prompt_tokens + 2 * 13 + 2


def test_a_wav_sent_as_mpeg_is_invalid(client, omni_model):
    with pytest.raises(grpc.RpcError) as caught:
        client.generate(ask(audio_part(SPEECH.read_bytes(), "audio/mpeg")), model="omni", max_tokens=4).collect()
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "chat.messages[0].parts[0].audio.media_type" in [v.field for v in details.field_violations]


def test_audio_to_an_image_model_is_failed_precondition(client, omni_model):
    with pytest.raises(grpc.RpcError) as caught:
        client.generate(ask(audio_part(SPEECH)), model="vision", max_tokens=4).collect()
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.FAILED_PRECONDITION and details.reason == "UNSUPPORTED_OPERATION"
    assert "does not take audio" in details.message


def test_more_than_four_audio_files_are_invalid(client, omni_model):
    with pytest.raises(grpc.RpcError) as caught:
        client.generate(ask(*[audio_part(SPEECH)] * 5), model="omni", max_tokens=4).collect()
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT and "at most 4 audio files" in details.message
