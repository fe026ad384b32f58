"""Speech to text against a live server's model named "whisper" (the fixture server serves a
tiny random Whisper; the default server never has one, so these skip there, also with
MLXGRPC_REQUIRE_LIVE=1). Random weights: the text is noise, its segments' timing too."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from mlxgrpc_client import audio, error_details, pb

SPEECH = Path(__file__).resolve().parents[2] / "testdata" / "speech.wav"  # 2 seconds of 16 kHz WAV


@pytest.fixture(scope="module")
def speech_model(models) -> pb.ModelInfo:
    found = [m for m in models if m.name == "whisper"]
    if not found:
        pytest.skip("the server has no model named 'whisper' (the fixture server serves one; the default never does)")
    return found[0]


def test_the_whisper_model_is_a_speech_model(client, speech_model):
    info = client.model_info("whisper")
    assert info.kind == pb.MODEL_KIND_SPEECH
    assert info.capabilities.transcription and not info.capabilities.generation


def test_a_wav_file_is_transcribed(client, speech_model):
    t = client.transcribe(SPEECH, model="whisper", request_id="py-transcribe-1")
    assert (t.request_id, t.model) == ("py-transcribe-1", "whisper")
    assert t.audio_seconds == pytest.approx(2.0, abs=0.05)
    assert len(t.segments) >= 1 and t.finished is not None
    assert [s.index for s in t.segments] == list(range(len(t.segments)))
    assert t.segment_count == len(t.segments) and t.language == "en" and t.seconds > 0


async def test_a_wav_file_streams_its_events_in_asyncio(aclient, speech_model):
    stream = aclient.transcribe_stream(audio(SPEECH), model="whisper")
    kinds = [event.WhichOneof("event") async for event in stream]
    assert kinds[0] == "started" and kinds[-1] == "finished" and set(kinds[1:-1]) == {"segment"}
    t = stream.result
    assert t.request_id == stream.request_id and t.model == "whisper"
    assert t.segment_count == len(kinds) - 2 == len(t.segments) and t.language == "en"


def test_a_wav_sent_as_mpeg_is_invalid(client, speech_model):
    with pytest.raises(grpc.RpcError) as caught:
        client.transcribe(audio(SPEECH.read_bytes(), "audio/mpeg"), model="whisper")
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "audio.media_type" in [v.field for v in details.field_violations]


def test_a_language_the_model_does_not_know_is_invalid(client, speech_model):
    with pytest.raises(grpc.RpcError) as caught:
        client.transcribe(SPEECH, model="whisper", language="xx")
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.field_violations] == ["language"]


def test_transcribe_on_a_text_model_is_failed_precondition(client, speech_model):
    with pytest.raises(grpc.RpcError) as caught:
        client.transcribe(SPEECH, model="llama")
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.FAILED_PRECONDITION and details.reason == "UNSUPPORTED_OPERATION"
