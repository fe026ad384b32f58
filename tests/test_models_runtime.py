"""Models at run time on live servers: LoadModel's stages and its oracle, UnloadModel (waiting
for requests, or cancelling them), the catalog's on-demand models with keep-alive, aliases
and tenant lists, least-recently-used residency under a memory limit, hostile sources, roles,
the worker contract's held model, and no thread left behind by load/unload cycles."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import threading

import grpc
import pytest
import pytest_asyncio

from engine.config import EngineConfig
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.models import ModelSet
from engine.residency.catalog import read_catalog
from engine.residency.lifecycle import Lifecycle
from service.assembly import engine_factory
from service.bearer_tokens import parse_lines
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.gen.mlxgrpc.v1 import lifecycle_pb2 as lpb
from service.metrics import Metrics, scrape
from service.server import ServerOptions, create_server
from tests.helpers import details, generate, request
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS

ADMIN = [("authorization", "Bearer t-admin")]
TEAM_A = [("authorization", "Bearer t-a")]
TEAM_B = [("authorization", "Bearer t-b")]
TOKENS = ["t-admin ops admin", "t-a team-a inference max_keep_alive_s=60", "t-b team-b inference"]
SCHEDULER = SchedulerConfig(max_active=4, max_queued=16, prefill_chunk=8, tick_tokens=24, min_prefill_tokens=4)
WEIGHTS = 626002  # bytes of the fixture llama's model.safetensors (the plan judges from files)


@pytest.fixture(scope="module")
def model_root(fixture_models, tmp_path_factory):
    """A model root holding the fixture llama as four models (a, b, c share its weights)."""
    root = tmp_path_factory.mktemp("model-root")
    for name in ("llama", "a", "b", "c"):
        shutil.copytree(fixture_models["llama"], root / name)
    return root


@contextlib.asynccontextmanager
async def serving(fixture_models, root, catalog: dict | None = None, memory_limit: int | None = None):
    config = EngineConfig(generation=GenerationConfig(scheduler=SCHEDULER))
    parsed = None
    if catalog is not None:
        (root / "catalog.json").write_text(json.dumps(catalog))
        parsed = read_catalog(root / "catalog.json", str(root))
    lifecycle = Lifecycle(engine_factory(config), str(root), *([parsed] if parsed else []), memory_limit=memory_limit)
    static = GenerationEngine(str(fixture_models["llama"]), name="llama", config=config.generation)
    models = ModelSet([static], [], lifecycle=lifecycle)
    metrics = Metrics(models)
    options = ServerOptions(auth_table=parse_lines(list(enumerate(TOKENS, 1)), "tokens"))
    srv, port = await create_server("127.0.0.1:0", models, options=options, metrics=metrics)
    await srv.start()
    await models.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pb_grpc.InferenceServiceStub(channel), models, metrics
    finally:
        await srv.stop(1.0)
        await models.close()


@pytest_asyncio.fixture(scope="module")
async def server(fixture_models, model_root):
    catalog = {"models": [{"name": "od", "source": "a", "keep_alive_s": 0},
                          {"name": "team", "source": "b", "tenants": ["team-a"]}],
               "aliases": {"od-alias": "od"}}
    async with serving(fixture_models, model_root, catalog) as running:
        yield running


async def load(stub, name: str, source: str = "", **kw) -> list[lpb.LoadModelResponse]:
    return [event async for event in stub.LoadModel(lpb.LoadModelRequest(name=name, source=source, **kw),
                                                     metadata=ADMIN)]


async def statuses(stub, metadata=ADMIN) -> dict[str, lpb.ModelStatus]:
    return {s.name: s for s in (await stub.ListModels(pb.ListModelsRequest(), metadata=metadata)).statuses}


async def refused(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value


async def oracle_tokens(stub, model: str) -> dict[str, list[int]]:
    return {name: (await generate(stub, request(prompt, model=model, max_tokens=ORACLE_TOKENS[name]),
                                  metadata=ADMIN)).token_ids for name, prompt in ORACLE_PROMPTS.items()}


async def test_a_loaded_model_streams_its_stages_answers_as_mlx_lm_and_unloads(server, oracle):
    stub, models, _ = server
    events = await load(stub, "fresh", "llama")
    stages = [e.stage for e in events]
    assert stages[0] == lpb.LOAD_STAGE_RESOLVING and stages[-1] == lpb.LOAD_STAGE_SERVING
    assert stages == sorted(stages) and lpb.LOAD_STAGE_READING in stages and lpb.LOAD_STAGE_WARMING in stages
    reading = [e for e in events if e.stage == lpb.LOAD_STAGE_READING]
    assert reading[-1].done == reading[-1].total == WEIGHTS
    assert events[-1].model.name == "fresh" and events[-1].model.source  # admins see the source
    assert await oracle_tokens(stub, "fresh") == oracle["llama"]
    listed = await statuses(stub)
    assert listed["fresh"].state == lpb.MODEL_STATE_READY and listed["fresh"].resident_bytes > 0
    assert not listed["fresh"].on_demand and listed["llama"].pinned
    taken = await refused(load(stub, "fresh", "llama"))
    assert taken.code() == grpc.StatusCode.ALREADY_EXISTS
    before = (await stub.GetLoad(pb.GetLoadRequest(), metadata=ADMIN)).model_unloads
    reply = await stub.UnloadModel(lpb.UnloadModelRequest(name="fresh"), metadata=ADMIN)
    assert reply.freed_bytes > 0 and reply.state == lpb.MODEL_STATE_UNLOADED
    assert "fresh" not in await statuses(stub) and "fresh" not in models.names()
    gone = await refused(generate(stub, request("Hi", model="fresh"), metadata=ADMIN))
    assert gone.code() == grpc.StatusCode.NOT_FOUND
    assert (await stub.GetLoad(pb.GetLoadRequest(), metadata=ADMIN)).model_unloads == before + 1


async def test_load_options_reach_the_engine_and_are_checked(server):
    stub, _, _ = server
    events = await load(stub, "half", "llama", options=lpb.ModelOptions(dtype="float16", context_length=64))
    assert events[-1].model.dtype == "float16"
    long = await refused(generate(stub, request("word " * 100, model="half"), metadata=ADMIN))
    assert long.code() == grpc.StatusCode.INVALID_ARGUMENT  # context_length caps the prompt
    await stub.UnloadModel(lpb.UnloadModelRequest(name="half"), metadata=ADMIN)
    for options, field in [(lpb.ModelOptions(dtype="int3"), "options"), (lpb.ModelOptions(kv_bits=5), "options"),
                           (lpb.ModelOptions(draft_model="../llama"), "draft_model")]:
        error = await refused(load(stub, "opts", "llama", options=options))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert details(error)["BadRequest"].field_violations[0].field == field
    error = await refused(load(stub, "emb", "llama", kind=2, options=lpb.ModelOptions(kv_bits=8)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_hostile_sources_are_refused_before_anything_is_read(server, model_root, tmp_path):
    stub, _, _ = server
    outside = tmp_path / "outside"
    shutil.copytree(model_root / "llama", outside)
    (model_root / "escape").unlink(missing_ok=True)
    (model_root / "escape").symlink_to(outside)
    with open(model_root / "huge.gguf", "wb") as f:  # 1 TB, sparse: nothing behind it
        f.truncate(1 << 40)
    try:
        for source in ("../llama", "a/../../llama", str(outside), "escape", "nothing-here", "/etc/passwd"):
            error = await refused(load(stub, "hostile", source))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, source
            assert details(error)["BadRequest"].field_violations[0].field == "source"
            assert str(model_root) not in error.details()  # the caller's own string at most, never the root
            assert source.startswith("/") or str(tmp_path) not in error.details()
        seen = []
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for event in stub.LoadModel(lpb.LoadModelRequest(name="huge", source="huge.gguf"), metadata=ADMIN):
                seen.append(event.stage)
        assert err.value.code() == grpc.StatusCode.OUT_OF_RANGE
        info = details(err.value)["ErrorInfo"]
        assert info.reason == "DOES_NOT_FIT" and info.metadata["planned_bytes"] == str(1 << 40)
        assert lpb.LOAD_STAGE_READING not in seen  # judged from its size alone
        assert "hostile" not in await statuses(stub) and "huge" not in await statuses(stub)
    finally:
        (model_root / "escape").unlink()
        (model_root / "huge.gguf").unlink()


async def test_only_admins_load_and_unload_and_tenants_see_only_their_models(server):
    stub, _, _ = server
    for metadata in (TEAM_A, TEAM_B, []):
        denied = await refused(stub.LoadModel(lpb.LoadModelRequest(name="x", source="llama"),
                                              metadata=metadata).read())
        assert denied.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)
        denied = await refused(stub.UnloadModel(lpb.UnloadModelRequest(name="llama"), metadata=metadata))
        assert denied.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)
    mine, theirs = await statuses(stub, TEAM_A), await statuses(stub, TEAM_B)
    assert "team" in mine and "team" not in theirs and "od" in theirs
    assert mine["team"].state == lpb.MODEL_STATE_UNLOADED and mine["team"].on_demand
    assert mine["llama"].resident_bytes == 0 and mine["llama"].idle_seconds == 0  # figures only for admins
    hidden = await refused(generate(stub, request("Hi", model="team"), metadata=TEAM_B))
    assert hidden.code() == grpc.StatusCode.NOT_FOUND


async def test_the_worker_contracts_model_is_held(server):
    stub, _, _ = server
    held = await refused(stub.UnloadModel(lpb.UnloadModelRequest(name="llama"), metadata=ADMIN))
    assert held.code() == grpc.StatusCode.FAILED_PRECONDITION and details(held)["ErrorInfo"].reason == "MODEL_HELD"


async def test_a_catalog_model_loads_on_its_first_request_and_unloads_once_idle(server, oracle):
    stub, _, metrics = server
    assert (await statuses(stub, TEAM_B))["od"].state == lpb.MODEL_STATE_UNLOADED
    loads = (await stub.GetLoad(pb.GetLoadRequest(), metadata=ADMIN)).model_loads
    prompt = ORACLE_PROMPTS["one"]
    out = await generate(stub, request(prompt, model="od-alias", max_tokens=ORACLE_TOKENS["one"]), metadata=TEAM_B)
    assert out.token_ids == oracle["llama"]["one"]
    assert (await stub.GetLoad(pb.GetLoadRequest(), metadata=ADMIN)).model_loads == loads + 1
    listed = await statuses(stub)
    assert listed["od"].aliases == ["od-alias"]
    for _ in range(100):  # keep_alive_s 0: unloaded once idle
        if (await statuses(stub))["od"].state == lpb.MODEL_STATE_UNLOADED:
            break
        await asyncio.sleep(0.05)
    assert (await statuses(stub))["od"].state == lpb.MODEL_STATE_UNLOADED
    text = scrape(metrics.registry)
    assert 'mlxgrpc_model_state{model="od",state="unloaded"} 1.0' in text and "mlxgrpc_model_unloads_total" in text


async def test_a_request_that_cannot_wait_for_the_load_is_told_when_to_retry(server):
    stub, _, _ = server
    assert (await statuses(stub))["od"].state == lpb.MODEL_STATE_UNLOADED
    busy = await refused(generate(stub, request("Hi", model="od"), metadata=TEAM_B, timeout=0.3))
    assert busy.code() == grpc.StatusCode.UNAVAILABLE and details(busy)["RetryInfo"].retry_delay.ToNanoseconds() > 0
    for _ in range(200):  # the load goes on without the caller
        if (await statuses(stub))["od"].state != lpb.MODEL_STATE_LOADING:
            break
        await asyncio.sleep(0.05)
    out = await generate(stub, request("Hi", model="od", keep_alive_seconds=-1), metadata=TEAM_A)
    assert out.finished is not None
    assert (await statuses(stub))["od"].keep_alive_seconds == 60  # "keep" within team-a's max_keep_alive_s
    await stub.UnloadModel(lpb.UnloadModelRequest(name="od"), metadata=ADMIN)


def long_request(model: str, tokens: int = 2000) -> pb.GenerateRequest:
    return request("Count on", model=model, stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))


async def test_unload_waits_for_requests_or_cancels_them(server):
    stub, _, _ = server
    await load(stub, "busy", "c")
    running = asyncio.create_task(generate(stub, long_request("busy", 300), metadata=ADMIN))
    while not (await statuses(stub))["busy"].requests:
        await asyncio.sleep(0.01)
    unload = asyncio.ensure_future(stub.UnloadModel(lpb.UnloadModelRequest(name="busy"), metadata=ADMIN))
    while (await statuses(stub))["busy"].state != lpb.MODEL_STATE_UNLOADING:
        await asyncio.sleep(0.01)
    late = await refused(generate(stub, request("Hi", model="busy"), metadata=ADMIN))
    assert late.code() == grpc.StatusCode.UNAVAILABLE
    finished = await running
    assert finished.finished.reason == gen_pb.FINISH_REASON_LENGTH and len(finished.token_ids) == 300  # its whole
    assert (await unload).state == lpb.MODEL_STATE_UNLOADED
    await load(stub, "busy", "c")
    running = asyncio.create_task(generate(stub, long_request("busy"), metadata=ADMIN))
    while not (await statuses(stub))["busy"].requests:
        await asyncio.sleep(0.01)
    await stub.UnloadModel(lpb.UnloadModelRequest(name="busy", cancel_requests=True), metadata=ADMIN)
    cancelled = await running  # ended as the Cancel RPC ends a stream
    assert cancelled.finished.reason == gen_pb.FINISH_REASON_CANCELLED and len(cancelled.token_ids) < 2000


async def test_under_a_memory_limit_the_least_recently_used_idle_model_makes_room(fixture_models, model_root):
    catalog = {"models": [{"name": n, "source": n} for n in ("a", "b", "c")]}
    limit = 623872 + 2 * WEIGHTS + 1000  # the pinned llama and two of the three
    async with serving(fixture_models, model_root, catalog, memory_limit=limit) as (stub, models, _):
        residency = models.residency
        for i, name in enumerate(["a", "b", "c"] * 3):
            out = await generate(stub, request("Hi", model=name), metadata=TEAM_B)
            assert out.finished is not None
            assert residency.held_bytes() <= limit
            ready = [n for n, s in (await statuses(stub)).items() if s.state == lpb.MODEL_STATE_READY]
            assert name in ready and len(ready) == min(i + 2, 3)  # llama and at most two catalog models
        assert (await stub.GetLoad(pb.GetLoadRequest(), metadata=ADMIN)).model_unloads == 7
        events = await load(stub, "d", "llama")  # a LoadModel makes room the same way, and says so
        evicted = [list(event.evicted) for event in events if event.evicted]
        assert evicted == [["b"]]  # b and c resident, b used before c
        # every resident model in use: no room now, and the caller is told when to retry
        holds = [asyncio.create_task(generate(stub, long_request(n, 300), metadata=ADMIN)) for n in ("c", "d")]
        while True:
            listed = await statuses(stub)
            if listed["c"].requests and listed["d"].requests:
                break
            await asyncio.sleep(0.01)
        full = await refused(load(stub, "e", "llama"))
        assert full.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "RetryInfo" in details(full)
        await asyncio.gather(*holds)
        assert residency.held_bytes() <= limit


async def test_load_and_unload_cycles_leave_no_thread_behind(fixture_models, model_root):
    async with serving(fixture_models, model_root) as (stub, models, _):
        await load(stub, "cycle", "a")  # a first cycle starts the pools that stay (tokenizing, file reads)
        await generate(stub, request("Hi", model="cycle"), metadata=ADMIN)
        await stub.UnloadModel(lpb.UnloadModelRequest(name="cycle"), metadata=ADMIN)
        threads = sorted(t.name for t in threading.enumerate())
        for _ in range(5):
            await load(stub, "cycle", "a")
            assert (await generate(stub, request("Hi", model="cycle"), metadata=ADMIN)).finished is not None
            await stub.UnloadModel(lpb.UnloadModelRequest(name="cycle"), metadata=ADMIN)
        assert sorted(t.name for t in threading.enumerate()) == threads
        assert models.residency.held_bytes() == models.residency.slots["llama"].resident_bytes


async def test_a_gguf_file_is_converted_in_a_child_process_once(fixture_models, model_root, tmp_path, monkeypatch,
                                                                oracle):
    import gguf

    from tests.gguf_writer import write_gguf

    monkeypatch.setenv("MLX_GRPC_CACHE", str(tmp_path / "cache"))
    write_gguf(fixture_models["llama"], model_root / "llama-f32.gguf", gguf.GGMLQuantizationType.F32)
    try:
        async with serving(fixture_models, model_root) as (stub, _, _):
            first = [e.stage for e in await load(stub, "g1", "llama-f32.gguf")]
            assert lpb.LOAD_STAGE_CONVERTING in first
            assert os.listdir(tmp_path / "cache")  # the child wrote the cache the loader read
            again = [e.stage for e in await load(stub, "g2", "llama-f32.gguf")]
            assert lpb.LOAD_STAGE_CONVERTING not in again and again[-1] == lpb.LOAD_STAGE_SERVING
            out = await generate(stub, request(ORACLE_PROMPTS["one"], model="g2", max_tokens=ORACLE_TOKENS["one"]),
                                 metadata=ADMIN)
            assert out.token_ids == oracle["llama"]["one"]
    finally:
        (model_root / "llama-f32.gguf").unlink()


async def test_a_speech_model_loads_transcribes_and_unloads(server, model_root):
    """LoadModel with kind SPEECH serves a Whisper directory from the root: Transcribe answers,
    ListModels and GetModelInfo say it is a speech model, options are refused, UnloadModel frees it."""
    from service.gen.mlxgrpc.v1 import model_pb2 as mpb
    from service.gen.mlxgrpc.v1 import speech_pb2 as spb
    from tests.fixtures.whisper import build_whisper, wav

    stub, models, _ = server
    build_whisper(model_root / "whisper")
    wrong = await refused(load(stub, "ears", "whisper", kind=mpb.MODEL_KIND_SPEECH,
                               options=lpb.ModelOptions(kv_bits=8)))
    assert wrong.code() == grpc.StatusCode.INVALID_ARGUMENT and "takes no options" in wrong.details()
    events = await load(stub, "ears", "whisper", kind=mpb.MODEL_KIND_SPEECH)
    assert events[-1].stage == lpb.LOAD_STAGE_SERVING and events[-1].model.kind == mpb.MODEL_KIND_SPEECH
    assert events[-1].model.capabilities.transcription
    heard = [r async for r in stub.Transcribe(spb.TranscribeRequest(
        model="ears", audio=spb.Audio(data=wav(2.0), media_type="audio/wav")), metadata=ADMIN)]
    assert heard[0].started.audio_seconds == pytest.approx(2.0) and heard[-1].WhichOneof("event") == "finished"
    listed = await statuses(stub)
    assert listed["ears"].state == lpb.MODEL_STATE_READY and listed["ears"].kind == mpb.MODEL_KIND_SPEECH
    reply = await stub.UnloadModel(lpb.UnloadModelRequest(name="ears"), metadata=ADMIN)
    assert reply.freed_bytes > 0 and "ears" not in models.names()
