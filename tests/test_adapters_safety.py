"""Loading adapters safely: LoadAdapter paths stay under --adapter-root; hostile files
(huge headers, huge ranks, oversized configs, FIFOs) are refused from what their
headers say, before any engine-thread work (counted: no engine-thread query ran for
them) and without repeating a server path; a load stuck reading its files stops
no other request's stream. A server of its own: "rooted" (a root under a temporary
directory, small limits) and "unrooted" (no root)."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import threading

import grpc
import pytest
import pytest_asyncio

from engine.adapters import paths, source
from engine.errors import DoesNotFit, InvalidRequest
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests import hostile_adapters as hostile
from tests.adapter_helpers import listed
from tests.helpers import details, generate, request
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS

INVALID = grpc.StatusCode.INVALID_ARGUMENT
MAX_BYTES = 4 << 20


class Counted:
    """Counts the controls one engine's adapters ask its engine thread."""

    def __init__(self, engine):
        self.calls, inner = 0, engine.adapters._engine_ask

        def ask(control):
            self.calls += 1
            return inner(control)

        engine.adapters._engine_ask = ask


@pytest_asyncio.fixture(scope="module")
async def guarded(fixture_models, fixture_adapters, adapter_oracle, tmp_path_factory):
    from engine.generation.config import GenerationConfig, SchedulerConfig
    from engine.generation.frontend.engine import GenerationEngine
    from engine.models import ModelSet
    from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
    from service.server import ServerOptions, create_server

    root = tmp_path_factory.mktemp("root")
    hostile.copy(fixture_adapters["qv"], root / "boot" / "qv")
    base = GenerationConfig(scheduler=SchedulerConfig(max_active=8, max_queued=32, prefill_chunk=8, tick_tokens=24,
                                                      min_prefill_tokens=4), max_adapters=8)
    rooted = GenerationEngine(str(fixture_models["llama"]), name="rooted", config=dataclasses.replace(
        base, adapter_root=str(root), max_adapter_rank=256, max_adapter_bytes=MAX_BYTES,
        adapters=(("outside", str(fixture_adapters["small"])), ("inside", str(root / "boot" / "qv")))))
    unrooted = GenerationEngine(str(fixture_models["llama"]), name="unrooted", config=dataclasses.replace(
        base, adapters=(("tone", str(fixture_adapters["tone"])),)))
    models = ModelSet([rooted, unrooted], [])
    srv, port = await create_server("127.0.0.1:0", models, options=ServerOptions(admin_loopback=True))
    await srv.start()
    await models.start()
    counts = {e.name: Counted(e) for e in (rooted, unrooted)}
    secrets = [str(root), os.path.realpath(root), str(fixture_adapters["tone"].parent)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield {"stub": pb_grpc.InferenceServiceStub(channel), "root": root, "engine": rooted, "counts": counts,
               "secrets": secrets}
    await srv.stop(1.0)
    await models.close()


async def refused(g, path: str, name: str = "x", model: str = "rooted") -> grpc.aio.AioRpcError:
    """The error of LoadAdapter(path); no engine-thread call ran for it and it repeats no server path."""
    before = g["counts"][model].calls
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await g["stub"].LoadAdapter(pb.LoadAdapterRequest(model=model, name=name, path=path), timeout=60)
    assert g["counts"][model].calls == before, "a refused load reached the engine thread"
    found = details(err.value)
    said = " ".join([err.value.details(), *found["ErrorInfo"].metadata.values(),
                     *(v.description for v in getattr(found.get("BadRequest"), "field_violations", ()))])
    for secret in g["secrets"]:
        if secret not in path:
            assert secret not in said, said
    assert name not in await listed(g["stub"], model)
    return err.value


def field(err) -> list[str]:
    return [v.field for v in details(err)["BadRequest"].field_violations]


@pytest.mark.parametrize("make, given", [
    (lambda root, outside: None, "../outside"),
    (lambda root, outside: None, "team/../../outside"),
    (lambda root, outside: None, "{outside}"),  # absolute, outside the root
    (lambda root, outside: (root / "link").symlink_to(outside), "link"),  # a link inside, leading out
    (lambda root, outside: (root / "half").mkdir() or os.symlink(outside / hostile.WEIGHTS, root / "half"
                                                                  / hostile.WEIGHTS)
     or (root / "half" / hostile.CONFIG).write_text((outside / hostile.CONFIG).read_text()), "half"),
    (lambda root, outside: None, "/nonexistent/adapter"),
])
async def test_paths_leaving_the_root_are_refused(guarded, fixture_adapters, make, given):
    outside = fixture_adapters["tone"]  # a real adapter, outside the root
    make(guarded["root"], outside)
    err = await refused(guarded, given.format(outside=outside))
    assert err.code() == INVALID and field(err) == ["path"]
    assert "adapter root" in err.details()


@pytest.mark.parametrize("make, said", [
    (lambda d: hostile.huge_header(d), "header of 1073741824 bytes, over the limit"),
    (lambda d: hostile.high_rank(d, 65536), "rank 65536 exceeds the server's limit of 256"),
    (lambda d: hostile.high_rank(d, 65536, config_rank=4), "rank is 4 but tensor"),
    (lambda d: hostile.sparse_weights(hostile.config(d), {f"{hostile.Q}.lora_a": (1 << 20, 4)}),
     f"over the server's limit of {MAX_BYTES}"),
    (lambda d: hostile.big_config(d, 80 << 10), "over the limit of 65536"),
    (lambda d: hostile.fifo_weights(d), "adapters.safetensors is not a regular file"),
    (lambda d: hostile.config(d) and (d / hostile.WEIGHTS).write_bytes(b"\x10" + b"\0" * 7 + b"[]" + b" " * 14),
     "not a JSON object"),
])
async def test_hostile_files_are_refused_from_their_headers(guarded, tmp_path_factory, make, said):
    directory = guarded["root"] / tmp_path_factory.mktemp("case").name
    make(directory)
    err = await refused(guarded, directory.name)
    assert err.code() == INVALID and field(err) == ["path"] and said in err.details(), err.details()


async def test_without_a_root_load_adapter_is_refused(guarded, fixture_adapters):
    err = await refused(guarded, str(fixture_adapters["tone"]), model="unrooted")
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert details(err)["ErrorInfo"].reason == "ADAPTER_ROOT_UNSET" and "--adapter-root" in err.details()


async def test_an_adapter_under_the_root_loads_and_generates_as_mlx_lm(guarded, fixture_adapters, adapter_oracle):
    stub, root = guarded["stub"], guarded["root"]
    hostile.copy(fixture_adapters["tone"], root / "team" / "tone")
    (root / "alias").symlink_to(root / "team")  # links that stay inside the root are fine
    for name, given, shown in [("rel", "team/tone", "team/tone"), ("abs", str(root / "team" / "tone"), "team/tone"),
                               ("dot", "./team//tone/", "team/tone"), ("link", "alias/tone", "alias/tone")]:
        reply = await stub.LoadAdapter(pb.LoadAdapterRequest(model="rooted", name=name, path=given))
        assert reply.adapter.source == shown
        prompt = "short"
        out = await generate(stub, request(ORACLE_PROMPTS[prompt], model="rooted", adapter=name,
                                           max_tokens=ORACLE_TOKENS[prompt]))
        assert out.token_ids == adapter_oracle[("llama", "tone")][prompt]
        await stub.UnloadAdapter(pb.UnloadAdapterRequest(model="rooted", name=name))


async def test_adapters_given_at_start_show_no_server_path(guarded):
    rooted = await listed(guarded["stub"], "rooted")
    assert (rooted["outside"].source, rooted["inside"].source) == ("small", "boot/qv")
    assert (await listed(guarded["stub"], "unrooted"))["tone"].source == "tone"
    before = guarded["counts"]["rooted"].calls
    again = await guarded["stub"].LoadAdapter(pb.LoadAdapterRequest(model="rooted", name="again", path="boot/qv"))
    assert again.adapter.source == "boot/qv"  # what ListAdapters shows loads again
    assert guarded["counts"]["rooted"].calls == before + 1  # the count the refusals compare sees a load
    await guarded["stub"].UnloadAdapter(pb.UnloadAdapterRequest(model="rooted", name="again"))


async def test_adapters_given_at_start_get_the_same_checks(guarded):
    directory = hostile.high_rank(guarded["root"] / "startup-rank", 65536)
    engine, before = guarded["engine"], guarded["counts"]["rooted"].calls
    with pytest.raises(InvalidRequest, match="exceeds the server's limit") as err:
        await engine.adapters.load_all((("big", str(directory)),))
    assert err.value.field == "adapters" and guarded["counts"]["rooted"].calls == before


def test_the_fixed_memory_room_is_checked_before_the_tensor_bytes_are_read(fixture_adapters, monkeypatch):
    reads = []
    fill = source._fill
    monkeypatch.setattr(source, "_fill", lambda f, offset, view, *a: reads.append(len(view)) or fill(f, offset, view,
                                                                                                        *a))
    place = paths.anywhere(str(fixture_adapters["tone"]), None, "path")
    with pytest.raises(DoesNotFit, match="can never fit"):
        source.read_files(place, source.AdapterLimits(), room=1024, field="path")
    assert len(reads) == 3  # the config, the header's length, the header: no tensor data


async def test_a_load_stuck_reading_its_files_stops_no_stream(guarded, fixture_adapters, monkeypatch):
    stub, root = guarded["stub"], guarded["root"]
    hostile.copy(fixture_adapters["small"], root / "slow")
    release, entered = threading.Event(), []
    readinto = source._readinto

    def stuck(*args):
        entered.append(1)
        if not release.wait(timeout=120):  # the test failed elsewhere: never leave the thread behind
            raise AssertionError("never released")
        raise OSError(errno.EIO, "Input/output error")

    async def until(count):
        while len(entered) < count:
            await asyncio.sleep(0.01)

    monkeypatch.setattr(source, "_readinto", stuck)
    loads = [asyncio.ensure_future(stub.LoadAdapter(pb.LoadAdapterRequest(model="rooted", name=f"slow{i}",
                                                                          path="slow"))) for i in range(4)]
    try:
        await until(1)
        # the deadline only keeps a regression from hanging the test
        out = await generate(stub, request("Hello world", model="rooted", max_tokens=6), timeout=60)
        assert len(out.token_ids) == 6 and out.finished is not None
        await until(4)
        assert not any(load.done() for load in loads)  # still stuck in their reads
        with pytest.raises(grpc.aio.AioRpcError) as err:  # reads are bounded
            await stub.LoadAdapter(pb.LoadAdapterRequest(model="rooted", name="slow5", path="slow"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "RetryInfo" in details(err.value)
    finally:
        release.set()
    for load in loads:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await load
        assert err.value.code() == INVALID and "Input/output error" in err.value.details()
    monkeypatch.setattr(source, "_readinto", readinto)
    reply = await stub.LoadAdapter(pb.LoadAdapterRequest(model="rooted", name="slow", path="slow"))
    assert reply.adapter.source == "slow"
    await stub.UnloadAdapter(pb.UnloadAdapterRequest(model="rooted", name="slow"))


def test_the_command_line_sets_the_root_and_the_limits(tmp_path, fixture_models):
    from service import cli

    args = cli.build_parser().parse_args(["serve", "--model", f"m={fixture_models['llama']}", "--no-embedding",
                                          "--adapter-root", str(tmp_path), "--max-adapter-rank", "16",
                                          "--max-adapter-bytes", "4096"])
    config = cli.build_models(args).generation[0].config
    assert (config.adapter_root, config.max_adapter_rank, config.max_adapter_bytes) == (str(tmp_path), 16, 4096)
    defaults = cli.build_parser().parse_args(["serve"])
    assert (defaults.adapter_root, defaults.max_adapter_rank, defaults.max_adapter_bytes) == (None, 256, 1 << 30)
