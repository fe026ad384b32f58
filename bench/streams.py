"""Anonymous health streams against authenticated work: do 1,000 callers without a token
holding (and re-opening) grpc.health.v1.Health/Watch streams refuse or slow a tenant's
Generate?

    .venv/bin/python -m bench.streams                 # embedded SmolLM2, 1,000 Watch streams
    .venv/bin/python -m bench.streams --quick         # fixture model, 50 streams (smoke)

One ``mlx-grpc serve`` subprocess with a tokens file (tenant ``app``, and ``ops`` to read
the server-wide figures). The app sends one short Generate at a time: its TTFT p50 on the
idle server, then while another process keeps ``--watch`` anonymous Watch streams open
over ``--connections`` channels, each refused one (RESOURCE_EXHAUSTED past
``--max-anonymous-streams``) opened again after ``--reopen-delay`` s (default 1, the
RetryInfo delay; less plays a caller that ignores it). Goals: the app is never refused, its TTFT p50 stays within 2x idle.
Health Check latency is measured beside it (probes must always answer).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import grpc

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

from .common import default_model, machine_facts, percentile
from .report import Report, Row, ms
from .servers import OurServer

APP, OPS = "tok-app", "tok-ops"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the anonymous side, in a process of its own (its loop never delays the app's clock) --

async def _watchers(address: str, streams: int, connections: int, delay: float, stop, figures) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    channels = [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(connections)]
    held, counts = set(), {"opened": 0, "refused": 0, "failed": 0}

    async def one(i: int) -> None:
        stub = health_pb2_grpc.HealthStub(channels[i % connections])
        while not stop.is_set():
            call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
            try:
                await call.read()
                counts["opened"] += 1
                held.add(i)
                await call.read()  # held until the server ends it or this task is cancelled
            except grpc.aio.AioRpcError as err:
                counts["refused" if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED else "failed"] += 1
            finally:
                held.discard(i)
                call.cancel()
            await asyncio.sleep(delay)

    tasks = [asyncio.create_task(one(i)) for i in range(streams)]
    while not stop.is_set():
        figures["held"] = len(held)
        figures.update(counts)
        await asyncio.sleep(0.2)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    figures.update(counts)
    for ch in channels:
        await ch.close()


def _watch_process(address: str, streams: int, connections: int, delay: float, stop, figures) -> None:
    class _Stop:  # a multiprocessing Event read without blocking the loop
        def is_set(self) -> bool:
            return stop.is_set()

    asyncio.run(_watchers(address, streams, connections, delay, _Stop(), figures))


# -- the app's side --------------------------------------------------------------------

async def app_requests(server: OurServer, count: int, tokens: int, prompt: list[int],
                       until: float = 0.0) -> tuple[list[float], int]:
    """Generate requests one at a time, ``count`` and until ``until`` (perf_counter): their TTFTs and
    how many were refused."""
    ttfts, refused, made = [], 0, 0
    while made < count or time.perf_counter() < until:
        made += 1
        req = pb.GenerateRequest(model="bench", bypass_prefix_cache=True, tokens=gen_pb.TokenIds(ids=prompt),
                                 stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))
        sent, first = time.perf_counter(), None
        try:
            async for resp in server.stub.Generate(req, metadata=bearer(APP)):
                if first is None and resp.WhichOneof("event") == "delta" and resp.delta.token_ids:
                    first = time.perf_counter()
                    ttfts.append(first - sent)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            refused += 1
    return ttfts, refused


async def health_latencies(server: OurServer, count: int) -> list[float]:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub, out = health_pb2_grpc.HealthStub(server.channel), []
    for _ in range(count):
        sent = time.perf_counter()
        await stub.Check(health_pb2.HealthCheckRequest())
        out.append(time.perf_counter() - sent)
        await asyncio.sleep(0.02)
    return out


async def measure(args, model_dir: Path, log_dir: Path, report: Report) -> None:
    tokens_file = log_dir / "tokens"
    tokens_file.write_text(f"{APP} app inference\n{OPS} ops admin\n")
    extra = ["--auth-token-file", str(tokens_file), *args.serve_arg]
    if args.max_anonymous_streams is not None:
        extra += ["--max-anonymous-streams", str(args.max_anonymous_streams)]
    server = OurServer(model_dir, None, log_dir, extra=extra)
    prompt = list(range(10, 10 + args.prompt_tokens))
    ctx = multiprocessing.get_context("spawn")
    stop, manager = ctx.Event(), ctx.Manager()
    figures = manager.dict()
    watcher = None

    def stop_watching() -> dict:
        stop.set()
        if watcher is not None:
            watcher.join(30)
            if watcher.is_alive():
                watcher.kill()
        return dict(figures)

    async def idle_phase() -> tuple[list[float], int]:
        return await app_requests(server, args.requests // 2, args.tokens, prompt,
                                  until=time.perf_counter() + args.window / 2)

    try:
        await server.start()
        await app_requests(server, 2, args.tokens, prompt)  # warm-up
        pid, idle_began = server.proc.proc.pid, time.perf_counter()
        idle_cpu = cpu_seconds(pid)
        idle, idle_refused = await idle_phase()
        idle_cpu = (cpu_seconds(pid) - idle_cpu) / (time.perf_counter() - idle_began)  # idle before and after the streams: the machine's drift
        health_idle = await health_latencies(server, args.requests)

        watcher = ctx.Process(target=_watch_process, args=(f"127.0.0.1:{server.port}", args.watch,
                                                           args.connections, args.reopen_delay, stop, figures))
        watcher.start()
        deadline = time.monotonic() + args.settle
        while time.monotonic() < deadline and figures.get("opened", 0) + figures.get("refused", 0) < args.watch:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # every watcher has tried at least once; refused ones keep re-opening
        attempts_before = figures.get("opened", 0) + figures.get("refused", 0)
        began, cpu_before = time.perf_counter(), (cpu_seconds(pid), cpu_seconds(watcher.pid))
        (under, under_refused), health_under = await asyncio.gather(
            app_requests(server, args.requests, args.tokens, prompt, until=began + args.window),
            health_latencies(server, args.requests))
        window = time.perf_counter() - began
        cpu = [(cpu_seconds(p) - b) / window for p, b in zip((pid, watcher.pid), cpu_before)]
        attempts = figures.get("opened", 0) + figures.get("refused", 0) - attempts_before
        calls = (await server.stub.GetLoad(pb.GetLoadRequest(), metadata=bearer(OPS))).calls
        held = figures.get("held", 0)
        final = stop_watching()
        await asyncio.sleep(1.0)
        after, after_refused = await idle_phase()
        idle, idle_refused = idle + after, idle_refused + after_refused
    finally:
        stop_watching()
        manager.shutdown()
        await server.close()

    p_idle, p_under = percentile(idle, 50), percentile(under, 50)
    rows = report.table(f"{args.watch} anonymous Watch streams ({args.connections} connections, refused ones "
                        f"re-opened after {args.reopen_delay:g} s); the app sends one {args.tokens}-token "
                        "Generate at a time", "measured", "goal")
    rows.append(Row("app TTFT p50 idle (ms)", ms(p_idle), note=f"{len(idle)} requests, before and after"))
    rows.append(Row("app TTFT p50 under the streams (ms)", ms(p_under), note=f"{len(under)} requests"))
    rows.append(Row("app TTFT under / idle", f"{p_under / p_idle:.2f}x", "<= 2x"))
    rows.append(Row("app requests refused", str(idle_refused + under_refused), "0"))
    rows.append(Row("health Check p50 idle / under (ms)",
                    f"{ms(percentile(health_idle, 50))} / {ms(percentile(health_under, 50))}",
                    note=f"max under {ms(max(health_under))}"))
    rows.append(Row("server CPU idle / under the streams (cores)", f"{idle_cpu:.2f} / {cpu[0]:.2f}",
                    note=f"the Watch client's process: {cpu[1]:.2f} cores; the same {os.cpu_count()} cores"))
    rows.append(Row("anonymous streams held (server / client)", f"{calls.anonymous_streams} / {held}",
                    f"<= {calls.max_anonymous_streams}"))
    rows.append(Row("anonymous Watch attempts per second", f"{attempts / window:.0f}",
                    note=f"refused since start: {calls.refused_anonymous_streams}; other errors: "
                         f"{final.get('failed', 0)}"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="generation model (default: embedded SmolLM2-135M; --quick: the fixture model)")
    p.add_argument("--quick", action="store_true", help="fixture model, 50 streams, 5 requests (smoke)")
    p.add_argument("--watch", type=int, help="anonymous Watch streams (default 1000; --quick 50)")
    p.add_argument("--connections", type=int, default=8, help="channels the Watch streams spread over")
    p.add_argument("--reopen-delay", type=float, default=1.0,
                   help="seconds before a refused or ended Watch stream is opened again (1: the RetryInfo delay; "
                        "less: a caller that ignores it)")
    p.add_argument("--max-anonymous-streams", type=int, help="the server's flag (default: its own, 16)")
    p.add_argument("--requests", type=int, help="the app's requests per phase (default 20; --quick 5)")
    p.add_argument("--tokens", type=int, default=8, help="tokens of each of the app's requests")
    p.add_argument("--prompt-tokens", type=int, default=32, help="prompt length of the app's requests")
    p.add_argument("--window", type=float, help="least seconds the app sends under the streams (default 20; "
                                                "--quick 3)")
    p.add_argument("--settle", type=float, default=60.0, help="most seconds to wait for every stream's first try")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG", help="extra argument to serve")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    args.watch = args.watch or (50 if args.quick else 1000)
    args.requests = args.requests or (5 if args.quick else 20)
    args.window = args.window or (3.0 if args.quick else 20.0)
    started = time.perf_counter()
    report = Report()
    report.facts.update(machine_facts())
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as tmp:
        if args.model:
            model_dir = Path(args.model)
        elif args.quick:
            from tests.fixtures.models import build_model

            model_dir = build_model("llama", Path(tmp) / "llama")
        else:
            model_dir = default_model()
        report.facts["model"] = str(model_dir.name)
        asyncio.run(measure(args, model_dir, Path(tmp), report))
    report.publish(" ".join(["python -m bench.streams", *(argv if argv is not None else sys.argv[1:])]),
                   started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
