"""The tenant fuzzer's long run against a server process (``mlx-grpc serve``).

    python -m bench.fuzz [--messages 100000] [--seed 0] [--max-minutes 0] [--concurrency 8] [--model DIR]

Starts a server with small limits over the llama fixture (or ``--model``), the qwen3
fixture as embedding model, the classifier fixture as "classify" and the SPLADE fixture as
"sparse", a tokens file with acme and beta (inference), ops (admin) and a router where that
role exists; acme plants its canary prompts, beta probes its prefix cache
with them, then beta (and callers without a valid token) send ``--messages`` fuzzed calls of
every RPC of InferenceService, VllmEngine and MlxEngine (tests/rpc_strategies.py) while acme
keeps generating. Prints the calls sent, the status histogram, INTERNAL/UNKNOWN answers, leaks
by kind (tests/tenant_fuzz_harness.py), health latency from a poller in a process of its own (bench/health_probe.py; stalls over
100 ms), the server's RSS before and after, and whether it is SERVING at the end. Exits 1
on any finding or a server not serving.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests import tenant_fuzz_harness as harness
from .common import cpu_model
from tests.cluster import REPO, Process
from tests.rpc_strategies import Sizes, calls, rpcs

MODEL, EMBEDDER, CLASSIFIER, SPARSE = "llama", "embed", "classify", "sparse"
SIZES = Sizes(repeat=6, depth=5, huge=(300, 5_000, 60_000, 400_000))
LIMIT_FLAGS = ["--max-tokens", "8", "--max-prompt-tokens", "160", "--max-prompt-bytes", "4096",
               "--max-chat-messages", "8", "--max-stop-strings", "4", "--max-logit-bias", "16",
               "--max-embed-inputs", "4", "--max-embed-input-bytes", "4096", "--max-active", "4",
               "--max-queued", "16", "--prefill-chunk", "16", "--max-message-bytes", str(4 << 20)]
STALL_S = 0.1  # a health check slower than this is a stall
PORT = re.compile(r"listening on port (\d+)")


class TimeUp(BaseException):
    """Ends the hypothesis run early (a BaseException: no shrinking, no replay)."""


def log(message: str) -> None:
    print(f"[fuzz] {message}", file=sys.stderr, flush=True)


def start_server(root: Path, model: Path, embedder: Path, classifier: Path, splade: Path,
                 tokens: Path) -> tuple[Process, str]:
    argv = [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", "0",
            "--model", f"{MODEL}={model}", "--embedding-model", f"{EMBEDDER}={embedder}",
            "--embedding-model", f"{CLASSIFIER}={classifier}", "--embedding-model", f"{SPARSE}={splade}",
            "--auth-token-file", str(tokens), "--no-access-log", "--grace", "1", *LIMIT_FLAGS]
    server = Process("server", argv, root, cwd=REPO)
    port: list[int] = []

    def bound() -> bool:
        if m := PORT.search(server.log_path.read_text(errors="replace")):
            port.append(int(m.group(1)))
        return bool(port)

    server.wait_until(bound, 300, "its port in the log")
    address = f"127.0.0.1:{port[0]}"
    server.wait_until(lambda: harness.serving(address), 300, "SERVING")
    return server, address


def run(args: argparse.Namespace, root: Path) -> int:
    from tests.fixtures.cross_encoder import build_classifier
    from tests.fixtures.models import build_model
    from tests.fixtures.splade import build_splade

    model = Path(args.model).resolve() if args.model else build_model("llama", root / "models" / "llama")
    embedder = build_model("qwen3", root / "models" / "qwen3")
    classifier = build_classifier(root / "models" / CLASSIFIER)
    splade = build_splade(root / "models" / SPARSE)
    tokens = harness.tokens_file(root / "tokens")
    log(f"starting the server on {model}")
    server, address = start_server(root, model, embedder, classifier, splade, tokens)
    tally = harness.Tally()
    paths = [str(model), str(embedder), str(classifier), str(splade), str(tokens), str(root)]
    deadline = time.monotonic() + args.max_minutes * 60 if args.max_minutes else None
    try:
        with grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
            secrets = harness.plant(channel, args.seed, MODEL, paths)
            fuzzer = harness.Fuzzer(channel, secrets, tally, call_timeout_s=120)
            for line in fuzzer.probe(MODEL):
                log(f"probe {line}")
            if harness.has_router_role():
                log(f"router receives acme's ids (the detector works): {harness.router_sees_acme(channel, secrets)}")
            rss_start = harness.rss_bytes(server.proc.pid)
            probe_out = root / "health.json"
            poller = subprocess.Popen([sys.executable, "-m", "bench.health_probe", address, "--pid",
                                       str(server.proc.pid), "--out", str(probe_out)], cwd=REPO)
            # The load generator yields the CPU to the server and the probe (both started before this).
            os.nice(args.nice)
            acme = harness.AcmeLoop(channel, secrets, tally, MODEL)
            acme.start()
            began = time.monotonic()
            pool = concurrent.futures.ThreadPoolExecutor(args.concurrency, thread_name_prefix="fuzz")
            slots = threading.BoundedSemaphore(args.concurrency)

            def send(call, caller) -> None:
                try:
                    fuzzer.send(call, caller)
                finally:
                    slots.release()

            @seed(args.seed)
            @settings(max_examples=args.messages, database=None, deadline=None, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))
            @given(calls(rpcs(), SIZES), st.sampled_from(harness.CALLERS))
            def fuzz(call, caller):
                slots.acquire()  # at most --concurrency calls in flight
                pool.submit(send, call, caller)
                if tally.sent % 5000 == 0:
                    log(f"{tally.sent} calls, {time.monotonic() - began:.0f}s, findings {sum(tally.found.values())}")
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeUp()

            try:
                fuzz()
            except TimeUp:
                log("time is up")
            pool.shutdown(wait=True)
            elapsed = time.monotonic() - began
            acme.stop.set()
            acme.join(120)
            poller.terminate()
            poller.wait(30)
            rss_end = harness.rss_bytes(server.proc.pid)
        final = harness.serving(address)
    finally:
        server.stop()
        if args.server_log:
            shutil.copyfile(server.log_path, args.server_log)
    health = json.loads(probe_out.read_text())
    lat = sorted(health["latencies"]) or [0.0]
    stalls = sum(1 for v in lat if v > STALL_S)
    # After warm-up (the first tenth of the run: caches, pools and compiled formats filling), RSS should stay flat.
    samples = health["rss"] or [(0.0, rss_start)]
    warm = next((b for t, b in samples if t >= samples[-1][0] / 10), samples[0][1])
    print(f"\nTenant fuzz: seed {args.seed}, {cpu_model()}, {tally.sent} calls in {elapsed:.0f}s "
          f"({tally.sent / max(elapsed, 1e-9):.0f}/s)")
    print(f"statuses: {dict(tally.statuses.most_common())}")
    print(f"INTERNAL/UNKNOWN answers: {tally.count(harness.STATUS)}")
    leak_kinds = (harness.IDS, harness.TEXT, harness.NAME, harness.PATH, harness.CACHE_HIT, harness.CANCELLED)
    print(f"leaks: {tally.count(*leak_kinds)}")
    if tally.found:
        print(tally.report())
    print(f"acme's own requests: {dict(acme.outcomes)}")
    print(f"health (from a process of its own): {len(lat)} checks, stalls > 100 ms {stalls}, "
          f"not SERVING {health['not_serving']}, "
          f"p50 {statistics.median(lat) * 1e3:.1f} ms, p99 {lat[int(0.99 * (len(lat) - 1))] * 1e3:.1f} ms, "
          f"max {lat[-1] * 1e3:.1f} ms")
    print(f"server RSS: {rss_start / 2**20:.0f} MiB -> {rss_end / 2**20:.0f} MiB "
          f"({(rss_end - rss_start) / max(rss_start, 1):+.1%}); after warm-up {warm / 2**20:.0f} MiB -> "
          f"{rss_end / 2**20:.0f} MiB ({(rss_end - warm) / max(warm, 1):+.1%}), peak "
          f"{max(b for _, b in samples) / 2**20:.0f} MiB")
    tenths = [samples[min(len(samples) - 1, i * len(samples) // 10)] for i in range(10)] + [samples[-1]]
    print("server RSS over the run (s: MiB): " + ", ".join(f"{t:.0f}: {b / 2**20:.0f}" for t, b in tenths))
    print(f"final health: {'SERVING' if final else 'NOT SERVING'}")
    return 0 if final and not tally.found else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="fuzzed calls to send")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (also the canary's)")
    parser.add_argument("--max-minutes", type=float, default=0.0, help="stop sending after this long (0: never)")
    parser.add_argument("--concurrency", type=int, default=8, help="calls in flight at once")
    parser.add_argument("--nice", type=int, default=10, help="niceness the fuzzer takes once the server and the "
                                                              "health probe run (0: none)")
    parser.add_argument("--server-log", help="keep the server's log here (e.g. run with PYTHONASYNCIODEBUG=1 to "
                                             "see which callbacks held the event loop)")
    parser.add_argument("--model", help="a generation model directory instead of the llama fixture")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mlxgrpc-fuzz-") as tmp:
        return run(args, Path(tmp).resolve())


if __name__ == "__main__":
    sys.exit(main())
