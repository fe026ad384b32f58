"""Models at run time on real servers: what a load costs the streams already running, what an
on-demand request waits, whether load/unload cycles give memory back, residency under a
memory limit, and how fast hostile sources are refused.

    .venv/bin/python -m bench.lifecycle              # embedded SmolLM2 GGUF, 50 cycles
    .venv/bin/python -m bench.lifecycle --quick      # fewer streams, cycles and requests

One ``mlx-grpc serve`` subprocess with a model root, a catalog and a tokens file (an admin
and an inference tenant), then a second one under a memory limit. Sections:

* a second model loads (the same GGUF file, its conversion removed from the cache first, so
  it converts again) while ``--streams`` streams decode on the first: their inter-token p99
  during the load against the same streams without it (goal: at most +20%, no stream errs);
* a request to an unloaded catalog model: its TTFT against the model's load time plus the
  TTFT of a first request once loaded (goal: within 10%), and the states ListModels showed;
* ``--cycles`` load/unload cycles of two models (the GGUF and the embedded MiniLM): the
  server's RSS after each unload against the first (goal: within 5%), threads and open files;
* three catalog models under a limit that holds two, a round-robin of requests: the largest
  sum of resident bytes seen against the limit, and every request answered;
* hostile sources (``..``, an absolute path outside, an escaping symlink, a 1 TB sparse
  .gguf) and an inference tenant's LoadModel: each refusal's time and code (goal < 100 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import grpc
import psutil

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import lifecycle_pb2 as lpb
from service.gen.mlxgrpc.v1 import model_pb2 as model_pb

from .common import default_embedding_model, default_model, machine_facts, percentile
from .report import Report, Row, ms
from .servers import OurServer

ADMIN = (("authorization", "Bearer bench-admin"),)
TENANT = (("authorization", "Bearer bench-app"),)


async def stream(stub, model: str, tokens: int, gaps: list[tuple[float, float]], errors: list[str],
                 metadata=ADMIN) -> float:
    """One greedy stream; appends (arrival, gap) per delta after the first; returns its TTFT."""
    sent, last, first = time.perf_counter(), None, 0.0
    req = pb.GenerateRequest(model=model, text="Tell me a long story about the sea.",
                             stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))
    try:
        async for resp in stub.Generate(req, metadata=metadata):
            if resp.WhichOneof("event") != "delta":
                continue
            now = time.perf_counter()
            if last is None:
                first = now - sent
            else:
                gaps.append((now, now - last))
            last = now
    except grpc.aio.AioRpcError as error:
        errors.append(error.code().name)
    return first


async def load(stub, name: str, source: str = "", **kw) -> list[lpb.LoadModelResponse]:
    return [e async for e in stub.LoadModel(lpb.LoadModelRequest(name=name, source=source, **kw), metadata=ADMIN)]


async def statuses(stub) -> dict[str, lpb.ModelStatus]:
    return {s.name: s for s in (await stub.ListModels(pb.ListModelsRequest(), metadata=ADMIN)).statuses}


async def load_beside_streams(server, args, cache: Path, rows: list[Row]) -> None:
    """The same long streams throughout: a quiet window, then the load's; p99 of each window's gaps."""
    stub = server.stub
    for _ in range(2):  # warm: the first streams pay one-time costs
        await asyncio.gather(*(stream(stub, "bench", 16, [], []) for _ in range(args.streams)))
    for converted in cache.iterdir():  # the second load converts from scratch
        if converted.is_dir():
            shutil.rmtree(converted)
    gaps: list[tuple[float, float]] = []
    errors: list[str] = []
    streams = [asyncio.create_task(stream(stub, "bench", 2000, gaps, errors)) for _ in range(args.streams)]
    await asyncio.sleep(2.0)  # every stream decoding
    quiet_from = time.perf_counter()
    await asyncio.sleep(args.window)
    began = time.perf_counter()
    stages = [lpb.LoadStage.Name(e.stage).removeprefix("LOAD_STAGE_") for e in await load(stub, "second", "model.gguf")]
    ended = time.perf_counter()
    for task in streams:
        task.cancel()
    await asyncio.gather(*streams, return_exceptions=True)
    quiet = [gap for at, gap in gaps if quiet_from <= at < began]
    during = [gap for at, gap in gaps if began <= at <= ended]
    base, loaded = percentile(quiet, 99), percentile(during, 99)
    rows.append(Row(f"inter-token p99, {args.streams} streams, while a GGUF loads ({ended - began:.1f} s)",
                    ms(loaded), ms(base), f"{loaded / base:.2f}x",
                    f"goal <= 1.20x; anchor: the same streams in the {args.window:.0f} s before; p50 "
                    f"{ms(percentile(during, 50))} vs {ms(percentile(quiet, 50))}; stages "
                    f"{'>'.join(dict.fromkeys(stages))}; stream errors: {len(errors)}"))
    await server.stub.UnloadModel(lpb.UnloadModelRequest(name="second"), metadata=ADMIN)


async def on_demand(server, rows: list[Row]) -> None:
    stub = server.stub
    seen: list[str] = []

    async def watch() -> None:
        while True:
            state = lpb.ModelState.Name((await statuses(stub))["od"].state).removeprefix("MODEL_STATE_")
            if not seen or seen[-1] != state:
                seen.append(state)
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.1)
    ttft = await stream(stub, "od", 4, [], [])
    await asyncio.sleep(0.1)
    watcher.cancel()
    load_s = (await statuses(stub))["od"].load_seconds
    await stub.UnloadModel(lpb.UnloadModelRequest(name="od"), metadata=ADMIN)
    await load(stub, "od")
    cold = await stream(stub, "od", 4, [], [])
    expected = load_s + cold
    rows.append(Row("TTFT of a request to an unloaded catalog model", ms(ttft), ms(expected),
                    f"{ttft / expected:.2f}x", f"anchor: its load ({load_s:.2f} s) + a first request's TTFT "
                    f"({ms(cold)}); goal within 10%; ListModels showed {' > '.join(seen)}"))
    await stub.UnloadModel(lpb.UnloadModelRequest(name="od"), metadata=ADMIN)


async def cycles(server, args, embedder: Path | None, rows: list[Row]) -> None:
    stub, proc = server.stub, psutil.Process(server.proc.proc.pid)
    rss, threads, files = [], [], []
    for i in range(args.cycles):
        await load(stub, "cycle-gen", "model.gguf")
        await stream(stub, "cycle-gen", 4, [], [])
        if embedder is not None:
            await load(stub, "cycle-embed", "embedder", kind=model_pb.MODEL_KIND_EMBEDDING)
            await stub.Embed(pb.EmbedRequest(model="cycle-embed", inputs=["a sentence"]), metadata=ADMIN).read()
            await stub.UnloadModel(lpb.UnloadModelRequest(name="cycle-embed"), metadata=ADMIN)
        await stub.UnloadModel(lpb.UnloadModelRequest(name="cycle-gen"), metadata=ADMIN)
        rss.append(proc.memory_info().rss)
        threads.append(proc.num_threads())
        files.append(proc.num_fds())
    worst = max(rss[1:] or rss) / rss[0]
    rows.append(Row(f"RSS after each of {args.cycles} load/unload cycles (two models)", f"{max(rss) >> 20} MiB",
                    f"{rss[0] >> 20} MiB", f"{worst:.3f}x",
                    f"after the first cycle; goal within 5%; threads {threads[0]}..{max(threads)} "
                    f"(last {threads[-1]}), open files {files[0]}..{max(files)} (last {files[-1]})"))


async def residency(server, args, limit: int, rows: list[Row]) -> None:
    stub, peak, answered, errors = server.stub, 0, 0, []
    for i in range(args.requests):
        name = "abc"[i % 3]
        await stream(stub, name, 4, [], errors)
        answered += 1
        listed = await statuses(stub)
        peak = max(peak, sum(s.resident_bytes for s in listed.values()
                             if s.state in (lpb.MODEL_STATE_READY, lpb.MODEL_STATE_LOADING)))
    unloads = (await stub.GetLoad(pb.GetLoadRequest(), metadata=ADMIN)).model_unloads
    rows.append(Row(f"resident bytes, round-robin of {args.requests} requests over 3 models, limit holds 2",
                    f"{peak >> 20} MiB", f"{limit >> 20} MiB", f"{peak / limit:.2f}x",
                    f"goal <= 1.00x; answered {answered - len(errors)}/{args.requests}; {unloads} unloads"))


async def hostile(server, root: Path, outside: Path, rows: list[Row]) -> None:
    stub = server.stub
    cases = [("'..'", "../outside", ADMIN), ("absolute outside", str(outside), ADMIN),
             ("escaping symlink", "escape", ADMIN), ("1 TB sparse .gguf", "huge.gguf", ADMIN),
             ("inference tenant", "model.gguf", TENANT)]
    for what, source, metadata in cases:
        began = time.perf_counter()
        try:
            async for _ in stub.LoadModel(lpb.LoadModelRequest(name="hostile", source=source), metadata=metadata):
                pass
            code = "OK (not refused)"
        except grpc.aio.AioRpcError as error:
            code = error.code().name
        took = time.perf_counter() - began
        rows.append(Row(f"LoadModel refused: {what}", ms(took), "100 ms", f"{took / 0.1:.2f}x", code))


async def measure(args, model: Path, embedder: Path | None, tmp: Path, report: Report) -> None:
    root, outside, cache = tmp / "root", tmp / "outside", tmp / "cache"
    for d in (root, outside, cache):
        d.mkdir()
    shutil.copy(model, root / "model.gguf")
    shutil.copy(model, outside / "model.gguf")
    if embedder is not None:
        shutil.copytree(embedder, root / "embedder")
    (root / "escape").symlink_to(outside / "model.gguf")
    with open(root / "huge.gguf", "wb") as f:
        f.truncate(1 << 40)
    (tmp / "tokens").write_text("bench-admin ops admin\nbench-app app inference\n")
    entries = [{"name": n, "source": "model.gguf", "keep_alive_s": -1} for n in ("od", "a", "b", "c")]
    (tmp / "catalog.json").write_text(json.dumps({"models": entries}))
    os.environ["MLX_GRPC_CACHE"] = str(cache)  # the servers convert into a cache of their own
    common = ["--model-root", str(root), "--model-catalog", str(tmp / "catalog.json"),
              "--auth-token-file", str(tmp / "tokens")]
    rows = report.table("models at run time (ours; the anchor is ours without the load, or the goal)",
                        "with", "anchor")
    server = OurServer(root / "model.gguf", None, tmp, max_active=max(8, args.streams), extra=common)
    try:
        await server.start()
        await load_beside_streams(server, args, cache, rows)
        await on_demand(server, rows)
        await cycles(server, args, embedder, rows)
        await hostile(server, root, outside, rows)
    finally:
        await server.channel.close()
        server.proc.stop()
    weights = (root / "model.gguf").stat().st_size
    limit = 3 * weights + weights // 2  # the pinned "bench" and two of a, b, c
    server = OurServer(root / "model.gguf", None, tmp, extra=[*common, "--models-memory-limit", str(limit)])
    try:
        await server.start()
        await residency(server, args, limit, rows)
    finally:
        await server.channel.close()
        server.proc.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.lifecycle", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a GGUF file (default: the embedded SmolLM2)")
    p.add_argument("--quick", action="store_true", help="4 streams, a 3 s quiet window, 5 cycles, 6 requests")
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--window", type=float, default=8.0, help="seconds of the quiet window before the load")
    p.add_argument("--cycles", type=int, default=50)
    p.add_argument("--requests", type=int, default=12)
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.streams, args.cycles, args.requests = min(args.streams, 4), min(args.cycles, 5), min(args.requests, 6)
        args.window = min(args.window, 3.0)
    started = time.perf_counter()
    report = Report()
    report.facts.update(machine_facts())
    model = Path(args.model) if args.model else default_model()
    report.facts["model"] = model.name
    with tempfile.TemporaryDirectory(prefix="bench-lifecycle-") as tmp:
        asyncio.run(measure(args, model, default_embedding_model(), Path(tmp), report))
    report.publish(" ".join(["python -m bench.lifecycle", *(argv if argv is not None else sys.argv[1:])]),
                   started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
