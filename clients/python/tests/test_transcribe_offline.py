"""transcribe without a live server: the audio helper and its sniffing, the request it builds,
a Transcript gathered from events, and the call over the wire to an in-process server that
answers Transcribe (a segment per word of the prompt), refusing once with RetryInfo: the
blocking and asyncio clients, their streams, retries, priorities and refusals."""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from mlxgrpc_client import (Segment, TranscribeStream, Transcript, aio, audio, connect, error_details, pb,
                            sniff_audio_media_type, transcribe_request)
from mlxgrpc_client.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc

SPEECH = Path(__file__).resolve().parents[2] / "testdata" / "speech.wav"  # 2 seconds of 16 kHz WAV


def test_sniff_audio_media_type():
    assert sniff_audio_media_type(b"RIFF\x24\xfa\0\0WAVEfmt ") == "audio/wav"
    assert sniff_audio_media_type(b"fLaC\0\0\0\x22") == "audio/flac"
    assert sniff_audio_media_type(b"OggS\0\x02") == "audio/ogg"
    assert sniff_audio_media_type(b"ID3\x04\0\0") == "audio/mpeg"  # an ID3 tag first
    for frame in (b"\xff\xfb\x90\x64", b"\xff\xf3", b"\xff\xe0"):  # an MPEG frame's 11 sync bits
        assert sniff_audio_media_type(frame) == "audio/mpeg"
    for other in (b"\xff\xd8\xff\xe0", b"\xff\xc0", b"\xff", b"RIFF\0\0\0\0WEBPVP8 ", b"RIFF\0\0\0\0AVI LIST",
                  b"RIFF", b"WAVE", b"\x89PNG\r\n\x1a\n", b"hello", b""):
        with pytest.raises(ValueError, match="WAV, FLAC, Ogg or MP3"):
            sniff_audio_media_type(other)


def test_audio_from_bytes_and_path(tmp_path):
    data = SPEECH.read_bytes()
    from_path = audio(SPEECH)
    assert (from_path.data, from_path.media_type) == (data, "audio/wav")
    assert audio(str(SPEECH)) == from_path == audio(data) == audio(bytearray(data)) == audio(memoryview(data))
    assert audio(b"fLaC\0\0\0\x22").media_type == "audio/flac"
    assert audio(data, "audio/mpeg").media_type == "audio/mpeg"  # the caller's word, checked by the server
    assert audio(b"anything", "audio/ogg") == pb.Audio(data=b"anything", media_type="audio/ogg")
    png = tmp_path / "picture.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ValueError):
        audio(png)  # an image is no audio
    with pytest.raises(FileNotFoundError):
        audio(tmp_path / "missing.wav")


def test_transcribe_request():
    req = transcribe_request(SPEECH, model="whisper", language="de", task="translate", prompt="Names: Ada.",
                             request_id="t-1", priority=-5)
    assert (req.model, req.language, req.task, req.prompt) == ("whisper", "de", pb.TRANSCRIPTION_TASK_TRANSLATE,
                                                               "Names: Ada.")
    assert (req.request_id, req.priority) == ("t-1", -5)
    assert req.audio == audio(SPEECH)
    given = pb.Audio(data=b"\xff\xfb\x90\x64", media_type="audio/mpeg")
    plain = transcribe_request(given)
    assert plain.audio == given  # a pb.Audio as it is
    assert (plain.model, plain.language, plain.task, plain.prompt, plain.priority) == (
        "", "", pb.TRANSCRIPTION_TASK_UNSPECIFIED, "", 0)  # the server's defaults
    assert len(plain.request_id) == 32 and plain.request_id != transcribe_request(given).request_id  # random
    assert transcribe_request(given, task="TRANSCRIBE").task == pb.TRANSCRIPTION_TASK_TRANSCRIBE
    assert transcribe_request(given, task="transcription_task_translate").task == pb.TRANSCRIPTION_TASK_TRANSLATE
    assert transcribe_request(given, task=pb.TRANSCRIPTION_TASK_TRANSLATE).task == pb.TRANSCRIPTION_TASK_TRANSLATE
    with pytest.raises(ValueError, match="transcribe, translate"):
        transcribe_request(given, task="summarize")
    with pytest.raises(ValueError):
        transcribe_request(b"not audio")  # no media type to sniff


def _events(request_id: str, words: list[str], language: str = "en") -> list[pb.TranscribeResponse]:
    out = [pb.TranscribeResponse(started=pb.TranscriptionStarted(request_id=request_id, model="whisper",
                                                                 audio_seconds=2.0))]
    for i, word in enumerate(words):
        out.append(pb.TranscribeResponse(segment=pb.TranscriptSegment(
            index=i, start_seconds=0.5 * i, end_seconds=0.5 * i + 0.5, text=f" {word}", token_ids=[50364, 100 + i],
            avg_logprob=-0.25, no_speech_prob=0.125, compression_ratio=1.5)))
    out.append(pb.TranscribeResponse(finished=pb.TranscriptionFinished(
        text="".join(f" {w}" for w in words), language=language, segments=len(words), seconds=0.75)))
    return out


def test_transcript_from_events():
    events = _events("t-1", ["Hello", "there"])
    t = Transcript.of(events)
    assert (t.request_id, t.model, t.audio_seconds) == ("t-1", "whisper", 2.0)
    assert t.segments == [Segment(0, 0.0, 0.5, " Hello", (50364, 100), -0.25, 0.125, 1.5),
                          Segment(1, 0.5, 1.0, " there", (50364, 101), -0.25, 0.125, 1.5)]
    assert (t.text, t.language, t.segment_count, t.seconds) == (" Hello there", "en", 2, 0.75)
    assert t.finished == events[-1].finished
    assert Segment.of(events[1].segment) == t.segments[0]
    partial = Transcript.of(events[:2])  # a stream that ended before finished
    assert partial.finished is None and len(partial.segments) == 1 and partial.text == ""
    assert Transcript.of([]) == Transcript()


class _Speech(pb_grpc.InferenceServiceServicer):
    """Transcribe: a segment per word of the request's prompt (none: "hello world"); refuses
    ``refusals`` times with RetryInfo; a language other than "en" or "" is INVALID_ARGUMENT,
    model "llama" FAILED_PRECONDITION; prompt "hold" holds the stream open after ``started``
    until the call is cancelled."""

    def __init__(self):
        self.requests, self.refusals, self.seen = [], 0, []
        self.cancelled = threading.Event()

    def Transcribe(self, request, context):
        self.requests.append(request)
        self.seen.append((dict(context.invocation_metadata()), context.time_remaining()))
        if self.refusals > 0:
            self.refusals -= 1
            status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message="refused for now")
            delay = duration_pb2.Duration()
            delay.FromMilliseconds(200)
            status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
            context.abort_with_status(rpc_status.to_status(status))
        if request.model == "llama":
            status = status_pb2.Status(code=code_pb2.FAILED_PRECONDITION, message="not a speech model")
            status.details.add().Pack(error_details_pb2.ErrorInfo(reason="UNSUPPORTED_OPERATION", domain="mlxgrpc.v1"))
            context.abort_with_status(rpc_status.to_status(status))
        if request.language not in ("", "en"):
            status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="language: not one of the model's")
            status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field="language", description="unknown")]))
            context.abort_with_status(rpc_status.to_status(status))
        events = _events(request.request_id, (request.prompt or "hello world").split(), request.language or "en")
        if request.prompt == "hold":
            context.add_callback(self.cancelled.set)  # before the client can cancel
            yield events[0]
            self.cancelled.wait(10)
            return
        yield from events


@pytest.fixture
def speech_server():
    servicer = _Speech()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_InferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(None)


def test_transcribe_over_the_wire(speech_server):
    servicer, address = speech_server
    servicer.refusals = 1  # refused once with RetryInfo before its first event: retried
    retries = []
    with connect(address, token="s3cret", timeout=30, priority=-20,
                 on_retry=lambda d, delay: retries.append(delay)) as client:
        t = client.transcribe(SPEECH, model="whisper", language="en", task="transcribe", request_id="t-1")
        other = client.transcribe(audio(SPEECH.read_bytes(), "audio/wav"), prompt="one two three", priority=7)
    assert isinstance(t, Transcript) and (t.request_id, t.model, t.audio_seconds) == ("t-1", "whisper", 2.0)
    assert [s.text for s in t.segments] == [" hello", " world"] and t.text == " hello world"
    assert [s.index for s in t.segments] == [0, 1] and t.segment_count == 2 and t.language == "en"
    assert len(other.segments) == 3 and other.request_id == servicer.requests[-1].request_id != ""
    assert retries == [0.2]
    first, again, second = servicer.requests
    assert first == again  # the same request, its id included, for every attempt
    assert (first.model, first.language, first.task, first.request_id) == (
        "whisper", "en", pb.TRANSCRIPTION_TASK_TRANSCRIBE, "t-1")
    assert first.audio == pb.Audio(data=SPEECH.read_bytes(), media_type="audio/wav")
    assert (second.model, second.prompt, second.task) == ("", "one two three", pb.TRANSCRIPTION_TASK_UNSPECIFIED)
    assert [r.priority for r in servicer.requests] == [-20, -20, 7]  # the client's default, unless the request's own
    meta, remaining = servicer.seen[0]
    assert meta["authorization"] == "Bearer s3cret" and 20 < remaining < 31  # the 30 s default deadline


def test_transcribe_stream_events_and_refusals(speech_server):
    servicer, address = speech_server
    with connect(address, max_attempts=1) as client:
        stream = client.transcribe_stream(SPEECH, request_id="t-2", prompt="a b")
        assert isinstance(stream, TranscribeStream) and stream.request_id == "t-2"  # before any event
        kinds = [event.WhichOneof("event") for event in stream]
        assert kinds == ["started", "segment", "segment", "finished"]
        assert stream.result.text == " a b" and stream.code() == grpc.StatusCode.OK
        assert stream.collect() is stream.result  # already read

        servicer.refusals = 1
        with pytest.raises(grpc.RpcError) as refused:  # max_attempts=1: never retried
            client.transcribe(SPEECH)
        assert error_details(refused.value).code == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.RpcError) as invalid:
            client.transcribe(SPEECH, language="xx")
        details = error_details(invalid.value)
        assert details.code == grpc.StatusCode.INVALID_ARGUMENT and [v.field for v in details.field_violations] == [
            "language"]
        with pytest.raises(grpc.RpcError) as wrong_model:
            client.transcribe(SPEECH, model="llama")
        details = error_details(wrong_model.value)
        assert details.code == grpc.StatusCode.FAILED_PRECONDITION and details.reason == "UNSUPPORTED_OPERATION"

        with client.transcribe_stream(SPEECH, prompt="hold") as held:
            assert next(held).HasField("started")
        assert servicer.cancelled.wait(5)  # leaving the block cancelled the call
        assert held.code() == grpc.StatusCode.CANCELLED and held.result.finished is None
        held = client.transcribe_stream(SPEECH, prompt="hold")
        next(held)
        held.cancel()
        assert list(held) == [] and held.result.segments == []  # iteration just stops


async def test_transcribe_in_asyncio(speech_server):
    servicer, address = speech_server
    servicer.refusals = 1
    async with aio.connect(address, priority=3) as client:
        t = await client.transcribe(SPEECH, model="whisper", request_id="t-3", prompt="x y")
        stream = client.transcribe_stream(SPEECH.read_bytes(), task="translate")
        kinds = [event.WhichOneof("event") async for event in stream]
        assert kinds == ["started", "segment", "segment", "finished"] and stream.result.segment_count == 2
        with pytest.raises(grpc.aio.AioRpcError) as wrong_model:
            await client.transcribe(SPEECH, model="llama")
        async with client.transcribe_stream(SPEECH, prompt="hold") as held:
            assert (await held.__anext__()).HasField("started")
        assert await held.code() == grpc.StatusCode.CANCELLED
    assert (t.request_id, t.model, t.text, [s.index for s in t.segments]) == ("t-3", "whisper", " x y", [0, 1])
    assert error_details(wrong_model.value).code == grpc.StatusCode.FAILED_PRECONDITION
    first, again, translated = servicer.requests[:3]
    assert first == again and first.priority == 3 and first.request_id == "t-3"
    assert translated.task == pb.TRANSCRIPTION_TASK_TRANSLATE and translated.audio.media_type == "audio/wav"
