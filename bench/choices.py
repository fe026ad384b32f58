"""n choices of one Generate: what do n = 8 samples of one prompt cost next to one?

    .venv/bin/python -m bench.choices                 # embedded SmolLM2
    .venv/bin/python -m bench.choices --quick         # fixture model, 3 requests each (smoke)

One ``mlx-grpc serve`` subprocess. One request at a time, the prefix cache bypassed: n = 1,
then n = 8 (one prompt prefill, eight rows decoding), then eight n = 1 requests sent at once
(eight prefills) for reference. Per request: TTFT (the first token of every choice: they
come in one step for n = 8; the last of the eight first tokens for separate requests) and the
aggregate rate (every choice's tokens over the request's wall time). Goals: n = 8's TTFT p50
within 1.2x n = 1's; its aggregate tokens/s at least 2x n = 1's.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

from .common import default_model, machine_facts, percentile
from .report import Report, Row, ms
from .servers import OurServer


def generate_request(prompt: list[int], tokens: int, n: int, seed: int) -> pb.GenerateRequest:
    return pb.GenerateRequest(model="bench", bypass_prefix_cache=True, tokens=gen_pb.TokenIds(ids=prompt), n=n,
                              sampling=gen_pb.SamplingParams(temperature=0.8, seed=seed),
                              stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))


async def one(server: OurServer, req: pb.GenerateRequest, sent: float) -> tuple[float, int, float]:
    """(TTFT, tokens of every choice, seconds to the last event) of one Generate sent at ``sent``."""
    first, tokens = None, 0
    async for resp in server.stub.Generate(req):
        if resp.WhichOneof("event") == "delta" and resp.delta.token_ids:
            first = first or time.perf_counter()
            tokens += len(resp.delta.token_ids)
    return first - sent, tokens, time.perf_counter() - sent


async def run(server: OurServer, prompts: list[list[int]], tokens: int, n: int, separate: bool
              ) -> tuple[list[float], list[float]]:
    """TTFTs and aggregate tokens/s, one request (or, ``separate``, n requests at once) per prompt."""
    ttfts, rates = [], []
    for seed, prompt in enumerate(prompts):
        sent = time.perf_counter()
        if separate:
            out = await asyncio.gather(*(one(server, generate_request(prompt, tokens, 1, seed + i), sent)
                                         for i in range(n)))
            ttfts.append(max(o[0] for o in out))  # every answer begun, as n = 8's first step begins all
            rates.append(sum(o[1] for o in out) / max(o[2] for o in out))
        else:
            ttft, produced, total = await one(server, generate_request(prompt, tokens, n, seed), sent)
            ttfts.append(ttft)
            rates.append(produced / total)
    return ttfts, rates


async def measure(args, model_dir: Path, log_dir: Path, report: Report) -> None:
    server = OurServer(model_dir, None, log_dir, max_active=max(args.n, 8), extra=args.serve_arg)
    prompts = [[10 + (i * 7 + j) % 400 for j in range(args.prompt_tokens)] for i in range(args.requests)]
    try:
        await server.start()
        await run(server, prompts[:1], 4, args.n, False)  # warm-up
        results = {label: await run(server, prompts, args.tokens, n, separate)
                   for label, n, separate in (("n = 1", 1, False), (f"n = {args.n}", args.n, False),
                                              (f"{args.n} x n = 1 at once", args.n, True))}
    finally:
        await server.close()
    ttft = {label: percentile(t, 50) for label, (t, _) in results.items()}
    rate = {label: percentile(r, 50) for label, (_, r) in results.items()}
    rows = report.table(f"{args.requests} requests each, one at a time: a {args.prompt_tokens}-token prompt, "
                        f"{args.tokens} tokens per choice, temperature 0.8, prefix cache bypassed",
                        "TTFT p50 (ms)", "aggregate tokens/s p50")
    for label in results:
        rows.append(Row(label, ms(ttft[label]), f"{rate[label]:.1f}"))
    many, single, separate = f"n = {args.n}", "n = 1", f"{args.n} x n = 1 at once"
    ratios = report.table(f"n = {args.n} against n = 1", "measured", "goal")
    ratios.append(Row("TTFT p50 ratio", f"{ttft[many] / ttft[single]:.2f}x", "<= 1.2x"))
    ratios.append(Row("aggregate tokens/s ratio", f"{rate[many] / rate[single]:.2f}x", ">= 2x"))
    ratios.append(Row(f"TTFT p50 of {separate} / n = {args.n}", f"{ttft[separate] / ttft[many]:.2f}x",
                      note="eight prompt prefills against one"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.choices", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="generation model (default: embedded SmolLM2-135M; --quick: the fixture model)")
    p.add_argument("--quick", action="store_true", help="fixture model, 3 requests each, short outputs (smoke)")
    p.add_argument("-n", type=int, default=8, help="choices of the many-choice request")
    p.add_argument("--requests", type=int, help="requests per row (default 10; --quick 3)")
    p.add_argument("--tokens", type=int, help="tokens per choice (default 64; --quick 8)")
    p.add_argument("--prompt-tokens", type=int, default=256, help="prompt length")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG", help="extra argument to serve")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    args.requests = args.requests or (3 if args.quick else 10)
    args.tokens = args.tokens or (8 if args.quick else 64)
    started = time.perf_counter()
    report = Report()
    report.facts.update(machine_facts())
    with tempfile.TemporaryDirectory(prefix="bench-choices-") as tmp:
        if args.model:
            model_dir = Path(args.model)
        elif args.quick:
            from tests.fixtures.models import build_model

            model_dir = build_model("llama", Path(tmp) / "llama")
        else:
            model_dir = default_model()
        report.facts["model"] = str(model_dir.name)
        asyncio.run(measure(args, model_dir, Path(tmp), report))
    report.publish(" ".join(["python -m bench.choices", *(argv if argv is not None else sys.argv[1:])]),
                   started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
