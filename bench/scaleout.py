"""Scale-out: aggregate generation throughput through SMG with one and two replicas.

    python -m bench.scaleout [--model GGUF|DIR] [--streams 8] [--tokens 128] [--reps 3]

Starts two replicas (``mlx-grpc serve``) and two gateways (``smg launch``): one in
front of the first replica only, one in front of both. Each repetition sends the
same burst of concurrent streamed chat completions (distinct prompts, exactly
``--tokens`` tokens each, greedy) through each gateway, and straight to the first
replica over our own gRPC API (the gateway's overhead); the order rotates per
repetition. Aggregate tokens/s = all completion tokens / (last token - first send).
Replicas on one machine share its cores and memory bandwidth: the ratio says how
much a second replica adds here, not what two machines would give.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.cluster import Gateway, Replica

from .common import Sample, default_model, machine_facts, percentile, prepare_f32, ratio


def log(message: str) -> None:
    print(f"[scaleout] {message}", file=sys.stderr, flush=True)


def prompt(i: int, rep: int) -> str:
    return f"Story {rep}-{i}: count upward by ones, separated by commas, starting at {17 * i + 3}:"


def burst(send, streams: int, rep: int) -> tuple[float, float]:
    """Runs ``streams`` concurrent ``send(text) -> (tokens, ttft_s)``; returns
    (aggregate tokens/s, median time to first token)."""
    results: list[tuple[int, float]] = []
    errors: list[BaseException] = []
    done_at: list[float] = []

    def run(i: int) -> None:
        try:
            results.append(send(prompt(i, rep)))
            done_at.append(time.perf_counter())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    began = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    if errors or len(results) != streams:
        raise RuntimeError(f"{len(errors)} streams failed: {errors[:1]}")
    tokens = sum(n for n, _ in results)
    return tokens / (max(done_at) - began), percentile([ttft for _, ttft in results], 50)


def through_gateway(gateway: Gateway, model: str, tokens: int):
    def send(text: str) -> tuple[int, float]:
        began, first, count = time.perf_counter(), None, 0
        body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": tokens,
                "temperature": 0, "ignore_eos": True, "stream_options": {"include_usage": True}}
        for event in gateway.stream_chat(body, timeout=300):
            if event.get("choices") and event["choices"][0]["delta"].get("content"):
                first = first or time.perf_counter()
            count = event["usage"]["completion_tokens"] if event.get("usage") else count
        return count, first - began

    return send


def direct(replica: Replica, tokens: int):
    def send(text: str) -> tuple[int, float]:
        began, first, count = time.perf_counter(), None, 0
        req = pb.GenerateRequest(chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", content=text)]),
                                 stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))
        for event in replica.stub.Generate(req, timeout=300):
            if event.HasField("delta") and event.delta.token_ids:
                first = first or time.perf_counter()
                count += len(event.delta.token_ids)
        return count, first - began

    return send


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scaleout", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="GGUF file or HF directory (default: the embedded SmolLM2-135M, as float32)")
    p.add_argument("--streams", type=int, default=8, help="concurrent streams per burst")
    p.add_argument("--tokens", type=int, default=128, help="tokens generated per stream")
    p.add_argument("--reps", type=int, default=3, help="repetitions (each runs every side once)")
    p.add_argument("--max-active", type=int, default=8, help="each replica's --max-active")
    p.add_argument("--policy", default="round_robin", help="the gateways' routing policy")
    args = p.parse_args(argv)

    model_dir = prepare_f32(args.model or default_model(), log)
    facts = machine_facts()
    with tempfile.TemporaryDirectory(prefix="mlx-grpc-scaleout-") as tmp:
        root = Path(tmp)
        (root / "models").mkdir()
        os.symlink(model_dir, root / "models" / "bench")
        replicas = [Replica(f"replica{i}", root / "models" / "bench", root, "--max-active", str(args.max_active))
                    for i in range(2)]
        gateways = []
        try:
            for r in replicas:
                r.wait_until(r.serving, 600, "health SERVING")
            gateways = [Gateway(replicas[:n], root, args.policy, name=f"smg-{n}") for n in (1, 2)]
            for g in gateways:
                g.wait_until(g.ready, 120, "ready")
            sides = {"1 replica, direct gRPC": direct(replicas[0], args.tokens),
                     "1 replica via smg": through_gateway(gateways[0], "bench", args.tokens),
                     "2 replicas via smg": through_gateway(gateways[1], "bench", args.tokens)}
            figures = measure(sides, args)
        finally:
            for process in [*gateways, *replicas]:
                process.stop()
    report(figures, facts, args, model_dir)
    return 0


def measure(sides: dict, args) -> dict[str, tuple[Sample, Sample]]:
    figures = {name: (Sample(), Sample()) for name in sides}
    names = list(sides)
    burst(sides[names[0]], args.streams, -1)  # warm-up: first-call costs on every side
    burst(sides[names[2]], args.streams, -2)
    for rep in range(args.reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            tps, ttft = burst(sides[name], args.streams, rep)
            figures[name][0].add(tps)
            figures[name][1].add(ttft)
            log(f"rep {rep} {name}: {tps:.1f} tok/s, TTFT p50 {ttft * 1000:.0f} ms")
    return figures


def report(figures: dict, facts: dict, args, model_dir: Path) -> None:
    base = figures["1 replica via smg"][0].median
    print(f"machine: {facts['machine']}\nBLAS: {facts['BLAS']}\nmodel: {model_dir}")
    print(f"{args.streams} concurrent streams x {args.tokens} tokens, {args.reps} reps, "
          f"policy {args.policy}, load average {'%.2f %.2f %.2f' % os.getloadavg()}\n")
    print("| side | aggregate tok/s | vs 1 replica via smg | TTFT p50 (ms) |\n|---|---|---|---|")
    for name, (tps, ttft) in figures.items():
        print(f"| {name} | {tps.fmt()} | {ratio(tps.median, base)} | {ttft.fmt(0, 1000)} |")


if __name__ == "__main__":
    sys.exit(main())
