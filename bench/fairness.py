"""Fairness between tenants on one real server: does a flood from tenant A delay
tenant B, and does B cost A throughput?

    .venv/bin/python -m bench.fairness                 # embedded SmolLM2, a flood of 500
    .venv/bin/python -m bench.fairness --quick         # fixture model, small flood (CI smoke)

One ``mlx-grpc serve`` subprocess. Phases: B alone sends one request at a time (its
TTFT p50 idle); A floods (``--flood`` streams, each sending its next long request as
soon as one ends, lengths varied around ``--flood-tokens``); then ``--window`` s
windows alternate, A alone and A beside B sending one request at a time
(``--rounds`` of the latter, each between two of the former): B's TTFT p50 under the
flood (goal <= 2x idle) and A's tok/s beside B against alone (goal within 10%).
Requests refused with RESOURCE_EXHAUSTED are counted and retried after their
RetryInfo delay.

Tenants: the server gets a tokens file (``--auth-token-file``) with the two tenants
(``tok-a A inference``, ``tok-b B inference``; or ``--tokens-file`` with
``--token-a``/``--token-b``), and each side sends ``authorization: Bearer`` metadata.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

from .common import default_model, machine_facts, percentile
from .report import Report, Row, ms
from .servers import OurServer


@dataclass
class Tally:
    """One tenant's figures: token arrival times, TTFTs, refusals."""

    token_times: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    refused: int = 0
    finished: int = 0

    def rate(self, start: float, end: float) -> float:
        return sum(start <= t < end for t in self.token_times) / max(end - start, 1e-9)


class Client:
    def __init__(self, server: OurServer, token: str | None, prompt: list[int]):
        self.server, self.prompt = server, prompt
        self.metadata = (("authorization", f"Bearer {token}"),) if token else None

    async def one(self, tally: Tally, tokens: int) -> None:
        """One request; refused ones are counted and sent again after their RetryInfo."""
        while True:
            req = pb.GenerateRequest(model="bench", bypass_prefix_cache=True, tokens=gen_pb.TokenIds(ids=self.prompt),
                                     stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))
            sent, first = time.perf_counter(), None
            try:
                async for resp in self.server.stub.Generate(req, metadata=self.metadata):
                    if resp.WhichOneof("event") == "delta" and resp.delta.token_ids:
                        now = time.perf_counter()
                        if first is None:
                            first = now
                            tally.ttfts.append(now - sent)
                        tally.token_times.extend([now] * len(resp.delta.token_ids))
                tally.finished += 1
                return
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                tally.refused += 1
                await asyncio.sleep(retry_delay(err))


class EngineClient:
    """The same requests straight to a ``GenerationEngine`` in this process, with the
    tenant set on the request (``--inproc``: the engine's fairness without gRPC)."""

    def __init__(self, engine, tenant: str, prompt: list[int]):
        from engine.tenancy import Tenant

        self.engine, self.tenant, self.prompt = engine, Tenant(tenant), prompt

    async def one(self, tally: Tally, tokens: int) -> None:
        from engine.errors import QueueFull
        from engine.events import Delta
        from engine.requests import GenerationRequest, StopOptions, TokenPrompt

        request = GenerationRequest(prompt=TokenPrompt(tuple(self.prompt)), bypass_prefix_cache=True,
                                    stopping=StopOptions(max_tokens=tokens, ignore_eos=True), tenant=self.tenant)
        while True:
            sent, first = time.perf_counter(), None
            try:
                async for event in self.engine.generate(request):
                    if isinstance(event, Delta) and event.token_ids:
                        now = time.perf_counter()
                        if first is None:
                            first = now
                            tally.ttfts.append(now - sent)
                        tally.token_times.extend([now] * len(event.token_ids))
                tally.finished += 1
                return
            except QueueFull as err:
                tally.refused += 1
                await asyncio.sleep(err.retry_after_s)


def retry_delay(err: grpc.aio.AioRpcError) -> float:
    from google.rpc import error_details_pb2, status_pb2

    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.RetryInfo()
                if detail.Unpack(info):
                    return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return 1.0


async def flood(client: Client, tally: Tally, streams: int, tokens: int, stop: asyncio.Event) -> None:
    """``streams`` loops of requests whose lengths vary around ``tokens`` (seeded), so
    A's rows finish out of step and no window catches the whole batch refilling."""
    rng = random.Random(0)

    async def loop() -> None:
        while not stop.is_set():
            await client.one(tally, rng.randint(max(1, tokens // 2), tokens * 3 // 2))

    tasks = [asyncio.create_task(loop()) for _ in range(streams)]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def sequential(client: Client, tally: Tally, tokens: int, *, count: int = 0, until: float = 0.0) -> None:
    """One request at a time: ``count`` of them, or until ``until`` (perf_counter)."""
    sent = 0
    while (count and sent < count) or (until and time.perf_counter() < until):
        await client.one(tally, tokens)
        sent += 1


async def measure(args, model_dir: Path, log_dir: Path, report: Report) -> None:
    prompt = list(range(10, 10 + args.prompt_tokens))
    max_queued = args.max_queued if args.max_queued >= 0 else args.flood + 16
    if args.inproc:
        from engine.generation.config import GenerationConfig, SchedulerConfig
        from engine.generation.frontend.engine import GenerationEngine

        server = GenerationEngine(str(model_dir), name="bench", config=GenerationConfig(
            scheduler=SchedulerConfig(max_active=args.max_active, max_queued=max_queued)))
        await server.start()
        a, b = EngineClient(server, "A", prompt), EngineClient(server, "B", [t + 1 for t in prompt])
        report.facts["tenants"] = "A and B on the engine in this process (--inproc, no gRPC)"
    else:
        path = args.tokens_file
        if not path:
            path = str(log_dir / "tokens")
            Path(path).write_text(f"{args.token_a} A inference\n{args.token_b} B inference\n")
        tokens_a, tokens_b, extra = args.token_a, args.token_b, ["--auth-token-file", path]
        report.facts["tenants"] = "A and B (a tokens file, Bearer tokens)"
        extra += ["--max-queued", str(max_queued), *args.serve_arg]
        server = OurServer(model_dir, None, log_dir, max_active=args.max_active, extra=extra)
    try:
        if not args.inproc:
            await server.start()
            a, b = Client(server, tokens_a, prompt), Client(server, tokens_b, [t + 1 for t in prompt])
        await sequential(b, Tally(), 4, count=2)  # warm-up
        idle = Tally()
        await sequential(b, idle, args.b_tokens, count=args.b_requests)

        flooded, beside, stop = Tally(), Tally(), asyncio.Event()
        flooding = asyncio.create_task(flood(a, flooded, args.flood, args.flood_tokens, stop))
        await asyncio.sleep(args.warmup)  # the flood fills every slot and the queue
        alone, with_b = [], []  # (start, end) windows, alternated so the flood's drift cancels out
        for phase in range(2 * args.rounds + 1):
            start = time.perf_counter()
            if phase % 2:
                await sequential(b, beside, args.b_tokens, until=start + args.window)
            else:
                await asyncio.sleep(args.window)
            (with_b if phase % 2 else alone).append((start, time.perf_counter()))
        stop.set()
        await flooding
    finally:
        await server.close()

    def rate(windows: list[tuple[float, float]]) -> float:
        return sum(flooded.rate(a, b) * (b - a) for a, b in windows) / sum(b - a for a, b in windows)

    alone_rate, beside_rate = rate(alone), rate(with_b)
    p_idle, p_flood = percentile(idle.ttfts, 50), percentile(beside.ttfts, 50)
    rows = report.table(f"Fairness: A floods with {args.flood} streams of {args.flood_tokens} tokens, "
                        f"B sends one {args.b_tokens}-token request at a time", "measured", "goal")
    rows.append(Row("B TTFT p50 idle (ms)", ms(p_idle), note=f"{len(idle.ttfts)} requests"))
    rows.append(Row("B TTFT p50 under A's flood (ms)", ms(p_flood), note=f"{len(beside.ttfts)} requests"))
    rows.append(Row("B TTFT under flood / idle", f"{p_flood / p_idle:.2f}x", "<= 2x"))
    rows.append(Row("A tok/s alone", f"{alone_rate:.1f}", note=f"{len(alone)} windows of {args.window:.0f} s"))
    rows.append(Row("A tok/s beside B", f"{beside_rate:.1f}", note=f"{len(with_b)} windows between them"))
    rows.append(Row("A tok/s beside B / alone", f"{beside_rate / max(alone_rate, 1e-9):.2f}", "0.90-1.10"))
    rows.append(Row("refused (A / B)", f"{flooded.refused} / {idle.refused + beside.refused}",
                    note="RESOURCE_EXHAUSTED, retried after RetryInfo"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="generation model (default: embedded SmolLM2-135M; --quick: the fixture model)")
    p.add_argument("--quick", action="store_true", help="fixture model, small flood and windows (CI smoke)")
    p.add_argument("--flood", type=int, help="A's concurrent streams (default 500; --quick 24)")
    p.add_argument("--flood-tokens", type=int, default=256,
                   help="mean tokens of A's requests (each between half and 1.5x, seeded)")
    p.add_argument("--b-tokens", type=int, default=8, help="tokens of each of B's requests")
    p.add_argument("--b-requests", type=int, default=10, help="B's requests on the idle server")
    p.add_argument("--prompt-tokens", type=int, default=32, help="prompt length of every request")
    p.add_argument("--window", type=float, help="seconds of each measured window (default 15; --quick 3)")
    p.add_argument("--rounds", type=int, default=3, help="windows with B, each between two without (default 3)")
    p.add_argument("--warmup", type=float, help="seconds the flood runs before measuring (default 20; --quick 2)")
    p.add_argument("--max-active", type=int, default=32, help="the server's --max-active")
    p.add_argument("--max-queued", type=int, default=-1, help="the server's --max-queued (-1: the flood + 16)")
    p.add_argument("--tokens-file", help="the server's tokens file (default: one the bench writes)")
    p.add_argument("--token-a", default="tok-a", help="tenant A's bearer token")
    p.add_argument("--token-b", default="tok-b", help="tenant B's bearer token")
    p.add_argument("--inproc", action="store_true",
                   help="drive a GenerationEngine in this process with tenants A and B set on the requests")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG", help="extra argument to serve")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    args.flood = args.flood or (24 if args.quick else 500)
    args.window = args.window or (3.0 if args.quick else 15.0)
    args.warmup = args.warmup or (2.0 if args.quick else 20.0)
    if args.quick and args.flood_tokens == 256:
        args.flood_tokens = 64
    started = time.perf_counter()
    report = Report()
    report.facts.update(machine_facts())

    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        if args.model:
            model_dir = Path(args.model)
        elif args.quick:
            from tests.fixtures.models import build_model

            model_dir = build_model("llama", Path(tmp) / "llama")
        else:
            model_dir = default_model()  # the server loads it as it would in production
        report.facts["model"] = str(model_dir.name)
        asyncio.run(measure(args, model_dir, Path(tmp), report))
    report.publish(" ".join(["python -m bench.fairness", *(argv if argv is not None else sys.argv[1:])]),
                   started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
