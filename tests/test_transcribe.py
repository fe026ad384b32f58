"""Transcribe through a live server with the tiny Whisper fixture (--speech-model): the
segments equal mlx-audio's own transcription of the same file (its loader from the path,
``generate`` at temperature 0) segment for segment, for a 16 kHz mono file, a 22.05 kHz
stereo one and one of two 30-second windows; the stream is `started`, the segments in
order, `finished`; GetModelInfo and ListModels say what the model is. Hostile audio (ten
hours claimed, cut short, mislabelled, empty, a picture) is INVALID_ARGUMENT naming the
field, from the header where the header says it, and the server goes on; a language or
task the model cannot honour, a speech call to a text model, and an unknown model are
refused. On the engine: a queued transcription is cancelled by its tenant's Cancel and not
by another tenant's, and a tenant is charged 50 tokens a second of audio."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
import pytest_asyncio

from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import model_pb2 as model_pb
from service.gen.mlxgrpc.v1 import speech_pb2 as spb
from tests.fixtures.whisper import build_whisper, wav, wav_bytes
from tests.helpers import details

AUDIO = {"mono-16k": wav(4.0), "stereo-22k": wav(2.5, rate=22050, channels=2, seed=1),
         "two-windows": wav(41.0, seed=2)}
SECONDS = {"mono-16k": 4.0, "stereo-22k": 2.5, "two-windows": 41.0}


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return build_whisper(tmp_path_factory.mktemp("whisper") / "whisper")


@pytest.fixture(scope="module")
def reference(whisper_dir, tmp_path_factory):
    """mlx-audio's transcript of each file, read from a path by its own loader, with its
    weights in the dtype the server runs (float32 on a CPU)."""
    from engine.speech.model import load_whisper

    model = load_whisper(whisper_dir)
    tmp = tmp_path_factory.mktemp("audio")
    out = {}
    for name, data in AUDIO.items():
        path = tmp / f"{name}.wav"
        path.write_bytes(data)
        out[name] = model.generate(str(path), temperature=0.0, verbose=None, fp16=False)
    return out


@pytest_asyncio.fixture(scope="module")
async def stub(whisper_dir, fixture_models, reference):
    from engine.generation.frontend.engine import GenerationEngine
    from engine.models import ModelSet
    from engine.speech.engine import SpeechEngine
    from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
    from tests.test_ops_security import extra_server

    models = ModelSet([GenerationEngine(str(fixture_models["llama"]), name="llama")], [],
                      speech=[SpeechEngine(str(whisper_dir), name="whisper")])
    await models.start()
    try:
        async with extra_server(models) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pb_grpc.InferenceServiceStub(channel)
    finally:
        await models.close()


def request(data: bytes, media_type: str = "audio/wav", **kw) -> spb.TranscribeRequest:
    return spb.TranscribeRequest(audio=spb.Audio(data=data, media_type=media_type), **kw)


async def transcribe(stub, req: spb.TranscribeRequest) -> list[spb.TranscribeResponse]:
    return [m async for m in stub.Transcribe(req)]


@pytest.mark.parametrize("name", list(AUDIO))
async def test_segments_equal_mlx_audio_s_transcription(stub, reference, name):
    events = await transcribe(stub, request(AUDIO[name], model="whisper", request_id=f"r-{name}"))
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "started" and kinds[-1] == "finished" and set(kinds[1:-1]) <= {"segment"}
    started, finished = events[0].started, events[-1].finished
    assert started.request_id == f"r-{name}" and started.model == "whisper"
    assert started.audio_seconds == pytest.approx(SECONDS[name], abs=0.01)
    want = reference[name]
    got = [e.segment for e in events[1:-1]]
    assert len(got) == len(want.segments) == finished.segments > 0
    assert name != "two-windows" or got[-1].start_seconds >= 30  # the second window's segments too
    for i, (g, w) in enumerate(zip(got, want.segments)):
        assert g.index == i
        assert list(g.token_ids) == list(w["tokens"]) and g.text == w["text"]
        assert (g.start_seconds, g.end_seconds) == pytest.approx((w["start"], w["end"]))
        assert g.avg_logprob == pytest.approx(w["avg_logprob"], abs=1e-6)
    assert finished.text == want.text and finished.language == want.language == "en"


async def test_the_model_says_it_transcribes(stub):
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="whisper"))).info
    assert info.kind == model_pb.MODEL_KIND_SPEECH
    assert info.capabilities.transcription and not info.capabilities.generation
    listed = (await stub.ListModels(pb.ListModelsRequest())).models
    assert {m.name: m.kind for m in listed}["whisper"] == model_pb.MODEL_KIND_SPEECH
    tokens = await stub.Tokenize(pb.TokenizeRequest(model="whisper", text="hello there"))
    assert tokens.token_ids and "".join(tokens.tokens).replace("\u0120", " ") == "hello there"


def _claiming(seconds: float) -> bytes:
    """A WAV whose data chunk claims ``seconds`` of 16 kHz mono and holds a tenth of a second."""
    return wav_bytes(b"\0\0" * 1600, 16000, 1, claimed=int(seconds * 16000 * 2))


HOSTILE = [
    ("ten hours claimed", request(_claiming(36000)), "audio.data", "seconds"),
    ("cut short", request(wav(4.0)[:30000]), "audio.data", "truncated"),
    ("a WAV called MP3", request(AUDIO["mono-16k"], "audio/mpeg"), "audio.media_type", "audio/wav"),
    ("a PNG called WAV", request(b"\x89PNG\r\n\x1a\n" + b"\0" * 64), "audio.media_type", "not a WAV"),
    ("an unknown media type", request(AUDIO["mono-16k"], "audio/aac"), "audio.media_type", "must be one of"),
    ("empty", request(b""), "audio.data", "empty"),
    ("no audio", spb.TranscribeRequest(), "audio", "required"),
]


@pytest.mark.parametrize("name,req,field,says", HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_hostile_audio_is_refused_naming_the_field(stub, name, req, field, says):
    began = time.perf_counter()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await transcribe(stub, req)
    assert time.perf_counter() - began < 30  # answered, not hung (the bench times it)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    violations = details(err.value)["BadRequest"].field_violations
    assert [v.field for v in violations] == [field]
    assert says in violations[0].description, violations[0].description
    assert (await transcribe(stub, request(wav(1.0))))[-1].WhichOneof("event") == "finished"


@pytest.mark.parametrize("kw,field", [({"language": "de"}, "language"),
                                      ({"task": spb.TRANSCRIPTION_TASK_TRANSLATE}, "task"),
                                      ({"task": 7}, "task"), ({"prompt": "word " * 200}, "prompt")])
async def test_what_the_model_cannot_honour_is_invalid(stub, kw, field):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await transcribe(stub, request(AUDIO["mono-16k"], **kw))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["BadRequest"].field_violations[0].field == field


async def test_a_speech_call_to_a_text_model_and_an_unknown_model(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await transcribe(stub, request(AUDIO["mono-16k"], model="llama"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "does not transcribe" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await transcribe(stub, request(AUDIO["mono-16k"], model="nobody"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Generate(pb.GenerateRequest(model="whisper", text="hi",
                                                        stopping=gen_pb.StoppingCriteria(max_tokens=2))):
            pass
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "speech model" in err.value.details()


async def test_a_queued_transcription_is_cancelled_only_by_its_tenant(whisper_dir):
    from engine.errors import RequestCancelled
    from engine.speech.engine import SpeechEngine
    from engine.speech.types import AudioInput, TranscriptionRequest
    from engine.tenancy import Tenant

    alice = Tenant("alice")
    engine = SpeechEngine(str(whisper_dir), name="whisper")
    await engine.start()
    try:
        async def run(request_id: str, tenant: Tenant, seconds: float):
            req = TranscriptionRequest(AudioInput(wav(seconds), "audio/wav"), request_id=request_id, tenant=tenant)
            return [e async for e in engine.transcribe(req)]

        first = asyncio.create_task(run("long", alice, 20.0))
        while not engine.active:
            await asyncio.sleep(0.01)
        queued = asyncio.create_task(run("next", alice, 1.0))
        while not engine.queued:
            await asyncio.sleep(0.01)
        assert not engine.cancel("next", "bob") and engine.queued == 1
        assert engine.cancel("next", "alice")
        with pytest.raises(RequestCancelled):
            await queued
        done = await first
        assert done[-1].audio_seconds == pytest.approx(20.0)
        stats = {s.tenant: s for s in engine.tenant_stats()}
        assert stats["alice"].tokens_last_minute >= 20 * 50
        assert "bob" not in stats or stats["bob"].tokens_last_minute == 0
        assert engine.idle
    finally:
        await engine.close()


async def test_a_running_transcription_stops_when_cancelled_and_the_next_is_served(whisper_dir):
    """Cancel after `started`: the transcription on the thread ends at its next block (it
    is counted interrupted, not finished), and the next request is transcribed in full."""
    from engine.errors import RequestCancelled
    from engine.speech.engine import SpeechEngine
    from engine.speech.types import AudioInput, TranscriptionRequest
    from engine.tenancy import Tenant

    alice = Tenant("alice")
    engine = SpeechEngine(str(whisper_dir), name="whisper")
    await engine.start()
    try:
        long = TranscriptionRequest(AudioInput(wav(600.0, seed=5), "audio/wav"), request_id="long", tenant=alice)
        events = engine.transcribe(long)
        started = await events.__anext__()
        assert started.audio_seconds == pytest.approx(600.0)
        finishing = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0.05)  # on the thread now: ten minutes are many windows' work
        assert engine.cancel("long", "alice")
        with pytest.raises(RequestCancelled):
            await finishing
        short = TranscriptionRequest(AudioInput(wav(1.0), "audio/wav"), request_id="short", tenant=alice)
        done = [e async for e in engine.transcribe(short)]
        assert done[-1].audio_seconds == pytest.approx(1.0)
        assert engine.interrupted == 1 and engine.transcribed_seconds == pytest.approx(1.0)
        assert engine.idle
    finally:
        await engine.close()
