"""The prefix cache's tiers on real servers: TTFT after a restart from the disk tier, the
disk tier's byte limit, and SIGKILL in the middle of disk writes.

    .venv/bin/python -m bench.cache_tiers                          # embedded SmolLM2, ~10 min
    .venv/bin/python -m bench.cache_tiers --quick --model DIR      # fixture model, seconds (CI smoke)
    .venv/bin/python -m bench.cache_tiers --only restart|limit|kill [--prompts N] [--kills N]

Every section starts its own ``mlx-grpc serve`` subprocesses on a cache directory of its
own (``--prefix-cache-dir``; greedy, speculation off) and talks to them over gRPC:

* restart: ``--reps`` distinct ~4,000-token prompts (the model's context allowing), each
  prefilled cold (``bypass_prefix_cache``), then stored; the server stops cleanly (SIGTERM),
  a second one on the same directory serves each prompt from the disk tier (read on the
  engine thread), a third one gets a Prefetch first. Goal: the disk hit's TTFT <= 0.15x the
  cold one, with the cold run's greedy tokens.
* limit: ``--prompts`` distinct prompts (entries of a few MB each, ``max_tokens`` 1, 8 at a
  time) on a server with a small ``--prefix-cache-disk-bytes``; the directory's bytes (every
  file under it, temporary files included) are sampled every 20 ms. Goal: never above the limit.
* kill: ``--kills`` rounds of distinct prompts sent at once and SIGKILL as soon as a temporary
  file shows a write in flight (after the first response ends); each restart must report no
  corrupt file, every file left must read back intact (``read_entry`` in this process), and a
  prompt stored before the kill must hit with the tokens of a cold prefill.

Not a test: goals are reported (met / missed), and the exit status is 0 unless a section failed
to run. Sections are plain functions in ``SECTIONS``: a further one (quantized KV on disk,
``--kv-bits``) is one more function adding its own table there.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engine.caches.disk_format import SUFFIX, TEMP_SUFFIX, BadEntry, read_entry
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from tests.cluster import Process

from .common import PARAGRAPH, Sample, default_model, free_port, machine_facts, ratio
from .report import Report, Row

REPO = Path(__file__).resolve().parent.parent
MODEL = "bench"


def log(message: str) -> None:
    print(f"[cache_tiers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- a server on a cache directory ---------------------------------------------------------------

@dataclass
class Reply:
    ttft: float = 0.0
    cached: int = 0
    prompt: int = 0
    tokens: list[int] = field(default_factory=list)


class TierServer(Process):
    """``mlx-grpc serve`` on one model with a prefix-cache directory; SIGTERM stops it, ``kill`` is SIGKILL."""

    def __init__(self, name: str, model: Path, log_dir: Path, cache_dir: Path, *extra: str):
        self.port, self.cache_dir = free_port(), cache_dir
        argv = [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--model", f"{MODEL}={model}", "--no-embedding", "--no-access-log", "--grace", "2",
                "--speculation", "off", "--prefix-cache-dir", str(cache_dir),
                "--prefix-cache-key-file", str(key_file(log_dir)), *extra]
        self.started = time.perf_counter()
        super().__init__(name, argv, log_dir, cwd=REPO)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.InferenceServiceStub(self.channel)

    def serving(self) -> bool:
        try:
            r = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        except grpc.RpcError:
            return False
        return r.status == health_pb2.HealthCheckResponse.SERVING

    def ready(self, timeout: float = 600) -> float:
        """Waits for SERVING; returns the seconds since the process started."""
        self.wait_until(self.serving, timeout, "health SERVING")
        return time.perf_counter() - self.started

    def load(self) -> pb.ModelLoad:
        return self.stub.GetLoad(pb.GetLoadRequest(model=MODEL), timeout=30).models[0]

    def tokenize(self, text: str) -> list[int]:
        return list(self.stub.Tokenize(pb.TokenizeRequest(model=MODEL, text=text), timeout=60).token_ids)

    def generate(self, ids: list[int], tokens: int, bypass: bool = False, timeout: float = 600) -> Reply:
        req = pb.GenerateRequest(model=MODEL, tokens=gen_pb.TokenIds(ids=ids), bypass_prefix_cache=bypass,
                                 stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))
        r, sent = Reply(), time.perf_counter()
        for event in self.stub.Generate(req, timeout=timeout):
            if event.HasField("started"):
                r.cached, r.prompt = event.started.cached_tokens, event.started.prompt_tokens
            elif event.HasField("delta") and event.delta.token_ids:
                r.ttft = r.ttft or time.perf_counter() - sent
                r.tokens.extend(event.delta.token_ids)
        return r

    def prefetch(self, ids: list[int]) -> tuple[float, pb.PrefetchResponse]:
        sent = time.perf_counter()
        got = self.stub.Prefetch(pb.PrefetchRequest(model=MODEL, tokens=gen_pb.TokenIds(ids=ids)), timeout=600)
        return time.perf_counter() - sent, got

    def settle(self, timeout: float = 120) -> pb.ModelLoad:
        """GetLoad once the disk writes stopped moving and no temporary file is left."""
        deadline, last = time.monotonic() + timeout, None
        while True:
            load = self.load()
            now = (load.prefix_cache_disk_writes, load.prefix_cache_disk_evictions, load.prefix_cache_disk_entries)
            if now == last and not temp_files(self.cache_dir) or time.monotonic() > deadline:
                return load
            last = now
            time.sleep(0.5)

    def stop(self, timeout: float = 60.0) -> float:
        """SIGTERM (the shutdown queues memory for the disk and lets it land); returns the seconds to exit."""
        began = time.perf_counter()
        self.channel.close()
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.name} did not stop within {timeout:.0f} s: killed")
                self.proc.kill()
                self.proc.wait(10)
        return time.perf_counter() - began

    def kill(self) -> None:
        self.channel.close()
        super().kill()


def start(name: str, ctx: "Context", cache_dir: Path, *extra: str) -> TierServer:
    server = TierServer(name, ctx.model, ctx.log_dir, cache_dir, *extra)
    server.ready()
    return server


# -- the directory ----------------------------------------------------------------------------------

def key_file(root: Path) -> Path:
    """The run's disk-tier key (outside every cache directory), made on first use."""
    path = root / "prefix-cache.key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "wb") as f:
            f.write(os.urandom(32))
    return path


def files(cache_dir: Path, suffix: str = SUFFIX) -> list[Path]:
    return sorted(p for p in cache_dir.rglob("*") if p.name.endswith(suffix))


def temp_files(cache_dir: Path) -> list[Path]:
    return files(cache_dir, TEMP_SUFFIX)


def dir_bytes(cache_dir: Path) -> int:
    """Bytes of every file under ``cache_dir`` now (files that vanish meanwhile count 0)."""
    total = 0
    for root, _, names in os.walk(cache_dir):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


class Sampler:
    """``dir_bytes`` every ``period`` seconds on a thread: the largest seen, and how many samples."""

    def __init__(self, cache_dir: Path, period: float = 0.02):
        self.cache_dir, self.period = cache_dir, period
        self.max = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.max = max(self.max, dir_bytes(self.cache_dir))
            self.samples += 1
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# -- prompts ----------------------------------------------------------------------------------------

@dataclass
class Context:
    args: argparse.Namespace
    model: Path
    log_dir: Path
    root: Path  # cache directories go under it
    base: list[int] = field(default_factory=list)  # a long English text's token ids
    kv_per_token: int = 0
    context_length: int = 0

    def prompt(self, i: int, tokens: int) -> list[int]:
        """Distinct prompts: ``i``'s digits, least significant first, as tokens of the text, then the text."""
        digits = sorted(set(self.base))[:10]
        head = [digits[(i // 10 ** k) % 10] for k in range(5)]
        return (head + self.base)[:tokens]


def probe(ctx: Context) -> None:
    """The model's context, KV bytes per token and a long tokenized text, asked of a server."""
    server = start("probe", ctx, ctx.root / "probe")
    try:
        info = server.stub.GetModelInfo(pb.GetModelInfoRequest(model=MODEL), timeout=30).info
        ctx.context_length = info.context_length
        plan = server.stub.PlanMemory(pb.PlanMemoryRequest(model=MODEL, context_tokens=1000), timeout=30).plan
        ctx.kv_per_token = max(1, plan.kv_bytes // 1000)
        want, per = min(4096, ctx.context_length), len(server.tokenize(PARAGRAPH))
        ctx.base = server.tokenize(PARAGRAPH * (want // max(1, per) + 2))
    finally:
        server.stop()


def mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def met(ok: bool) -> str:
    return "met" if ok else "MISSED"


# -- sections ---------------------------------------------------------------------------------------

def restart(ctx: Context, report: Report) -> None:
    a = ctx.args
    n = min(a.restart_tokens, ctx.context_length - a.gen_tokens - 8)
    prompts = [ctx.prompt(i, n) for i in range(a.reps)]
    cache_dir = ctx.root / "restart"
    cold, stored, memory, disk, fetch, after = (Sample() for _ in range(6))
    equal, cached, tiers = [], [], []
    server = start("restart-1", ctx, cache_dir)
    try:
        server.generate(ctx.prompt(999, 16), 2, bypass=True)  # first-call costs
        replies = []
        for ids in prompts:
            r = server.generate(ids, a.gen_tokens, bypass=True)
            cold.add(r.ttft)
            replies.append(r)
            stored.add(server.generate(ids, a.gen_tokens).ttft)
            hit = server.generate(ids, a.gen_tokens)
            memory.add(hit.ttft)
            equal.append(hit.tokens == r.tokens)
            log(f"restart: {n} tokens cold {r.ttft * 1e3:.0f} ms, memory hit {hit.ttft * 1e3:.0f} ms")
        entry_bytes = server.settle().prefix_cache_disk_bytes / max(1, len(files(cache_dir)))
    finally:
        stop_s = server.stop()
    server = start("restart-2", ctx, cache_dir)
    up_s = time.perf_counter() - server.started
    try:
        entries = server.load().prefix_cache_disk_entries
        server.generate(ctx.prompt(998, 16), 2, bypass=True)
        for ids, r in zip(prompts, replies):
            hit = server.generate(ids, a.gen_tokens)
            disk.add(hit.ttft)
            cached.append(hit.cached)
            equal.append(hit.tokens == r.tokens)
            log(f"restart: disk hit {hit.ttft * 1e3:.0f} ms ({hit.cached} cached)")
        disk_hits = server.load().prefix_cache_disk_hits
    finally:
        server.stop()
    server = start("restart-3", ctx, cache_dir)
    try:
        server.generate(ctx.prompt(997, 16), 2, bypass=True)
        for ids, r in zip(prompts, replies):
            took, got = server.prefetch(ids)
            fetch.add(took)
            tiers.append(pb.CacheTier.Name(got.tier))
            hit = server.generate(ids, a.gen_tokens)
            after.add(hit.ttft)
            equal.append(hit.tokens == r.tokens)
            log(f"restart: prefetch {took * 1e3:.0f} ms ({tiers[-1]}), then TTFT {hit.ttft * 1e3:.0f} ms")
    finally:
        server.stop()
    c = cold.median
    t = report.table(f"Restart: {a.reps} distinct {n}-token prompts, cold vs served from the disk tier after a "
                     f"clean restart ({a.gen_tokens} greedy tokens each)", "measured", "goal")
    t.append(Row("cold TTFT, bypass_prefix_cache (ms)", cold.fmt(0, 1e3), "", "1.00x"))
    t.append(Row("TTFT of the run that stores it (ms)", stored.fmt(0, 1e3), "", ratio(stored.median, c)))
    t.append(Row("memory-tier hit TTFT, same server (ms)", memory.fmt(0, 1e3), "", ratio(memory.median, c)))
    t.append(Row("clean stop (SIGTERM, writes flushed) (s)", f"{stop_s:.1f}", "",
                 note=f"one entry {mib(entry_bytes)} MiB on disk"))
    t.append(Row("restart to SERVING (index rebuilt) (s)", f"{up_s:.1f}", "", note=f"{entries} entries found"))
    t.append(Row("disk-tier hit TTFT after restart (ms)", disk.fmt(0, 1e3), "<= 0.15x cold",
                 ratio(disk.median, c), f"{met(disk.median <= 0.15 * c)}; cached tokens {min(cached)}-{max(cached)}; "
                                       f"GetLoad disk hits {disk_hits}"))
    t.append(Row("Prefetch, disk -> memory (ms)", fetch.fmt(0, 1e3), "", ratio(fetch.median, c),
                 "tier " + "/".join(sorted(set(tiers)))))
    t.append(Row("TTFT after Prefetch (ms)", after.fmt(0, 1e3), "<= 0.15x cold", ratio(after.median, c),
                 met(after.median <= 0.15 * c)))
    t.append(Row("greedy tokens equal the cold run's", f"{sum(equal)} / {len(equal)}", "all",
                 note=met(all(equal)) + "; memory hit, disk hit, after Prefetch"))


def limit(ctx: Context, report: Report) -> None:
    a = ctx.args
    n = max(8, min(ctx.context_length - 8, a.entry_bytes // ctx.kv_per_token))
    cap = a.disk_bytes
    cache_dir = ctx.root / "limit"
    server = start("limit", ctx, cache_dir, "--prefix-cache-disk-bytes", str(cap))
    sampler = Sampler(cache_dir)
    began = time.perf_counter()
    try:
        with ThreadPoolExecutor(a.clients) as pool:
            done = 0
            for _ in pool.map(lambda i: server.generate(ctx.prompt(i, n), 1), range(a.prompts)):
                done += 1
                if done % max(1, a.prompts // 10) == 0:
                    log(f"limit: {done}/{a.prompts} prompts, max {mib(sampler.max)} MiB of {mib(cap)}")
        sent_s = time.perf_counter() - began
        during = sampler.max
        load = server.settle()
        final = dir_bytes(cache_dir)
    finally:
        sampler.stop()
        server.stop()
    after_stop = dir_bytes(cache_dir)
    worst = max(sampler.max, after_stop)
    t = report.table(f"Byte limit: {a.prompts} distinct {n}-token prompts (~{mib(n * ctx.kv_per_token)} MiB "
                     f"entries), {a.clients} at a time, --prefix-cache-disk-bytes {mib(cap)} MiB", "measured", "goal")
    t.append(Row("largest directory size seen (MiB)", mib(worst), f"<= {mib(cap)}", ratio(worst, cap),
                 f"{met(worst <= cap)}; {sampler.samples} samples every 20 ms, temporary files included"))
    t.append(Row("while requests ran / settled / after SIGTERM (MiB)",
                 f"{mib(during)} / {mib(final)} / {mib(after_stop)}", f"<= {mib(cap)}"))
    t.append(Row("GetLoad disk entries / bytes (MiB)", f"{load.prefix_cache_disk_entries} / "
                 f"{mib(load.prefix_cache_disk_bytes)}", "", note=f"{len(files(cache_dir))} files after the stop"))
    t.append(Row("GetLoad disk writes / evictions", f"{load.prefix_cache_disk_writes} / "
                 f"{load.prefix_cache_disk_evictions}", "", note=f"{a.prompts} prompts in {sent_s:.0f} s "
                                                             f"({a.prompts / sent_s:.1f}/s)"))
    t.append(Row("GetLoad corrupt files", str(load.prefix_cache_disk_corrupt_files), "0",
                 note=met(load.prefix_cache_disk_corrupt_files == 0)))


def kill(ctx: Context, report: Report) -> None:
    a = ctx.args
    n = max(8, min(ctx.context_length - 16, a.kill_entry_bytes // ctx.kv_per_token))
    cache_dir = ctx.root / "kill"
    tally = dict(in_flight=0, temps_left=0, temps_after=0, corrupt=0, files=0, intact=0, checked=0, hits=0,
                 equal=0, mismatch_entries=0)
    salt, previous = 0, []
    for round_ in range(a.kills + 1):
        server = start(f"kill-{round_}", ctx, cache_dir, "--prefix-cache-disk-bytes", str(a.kill_disk_bytes))
        pool, prompts = None, []
        try:
            if round_:
                verify(server, ctx, cache_dir, previous, tally)
            if round_ == a.kills:
                break
            prompts = [ctx.prompt(salt + j, n) for j in range(a.clients + 1)]
            salt += a.clients + 1
            server.generate(prompts[0], 4)  # one entry surely on disk: stored, and its write landed
            server.wait_until(lambda: server.load().prefix_cache_disk_writes >= 1, 30, "a disk write")
            pool = ThreadPoolExecutor(a.clients)
            calls = [pool.submit(server.generate, ids, 4) for ids in prompts[1:]]
            wait(calls, return_when=FIRST_COMPLETED)
            deadline = time.monotonic() + 5.0  # a write shows as a temporary file until its rename
            while not temp_files(cache_dir) and time.monotonic() < deadline:
                time.sleep(0.001)
            tally["in_flight"] += bool(temp_files(cache_dir))
        finally:
            if pool is None:
                server.stop()
            else:
                server.kill()
                pool.shutdown(wait=True, cancel_futures=True)
        tally["temps_left"] += len(temp_files(cache_dir))
        previous = prompts
        log(f"kill {round_ + 1}/{a.kills}: {len(files(cache_dir))} files, {len(temp_files(cache_dir))} temporary")
    k = tally
    t = report.table(f"SIGKILL during writes: {a.kills} rounds of {a.clients} distinct {n}-token prompts "
                     f"(~{mib(n * ctx.kv_per_token)} MiB entries), killed once a write was in flight", "measured",
                     "goal")
    t.append(Row("kills with a temporary file present (a write in flight)", f"{k['in_flight']} / {a.kills}", "",
                 note=f"{k['temps_left']} temporary files left behind in all"))
    t.append(Row("temporary files after each restart", str(k["temps_after"]), "0", note=met(k["temps_after"] == 0)))
    t.append(Row("GetLoad corrupt files after the restarts", str(k["corrupt"]), "0", note=met(k["corrupt"] == 0)))
    t.append(Row("files read back intact (read_entry, MACs)", f"{k['intact']} / {k['files']}", "all",
                 note=met(k["intact"] == k["files"]) + f"; GetLoad entries differed from the files "
                                                       f"{k['mismatch_entries']} times"))
    t.append(Row("prompts stored before a kill that hit after it", f"{k['hits']} / {k['checked']}", "",
                 note="one prompt per round whose entry survived"))
    t.append(Row("those hits' greedy tokens equal a cold prefill's", f"{k['equal']} / {k['hits']}", "all",
                 note=met(k["equal"] == k["hits"] and k["hits"] > 0)))


def verify(server: TierServer, ctx: Context, cache_dir: Path, previous: list[list[int]], tally: dict) -> None:
    """After a kill: what the restart kept is complete, and a surviving prompt hits with a cold prefill's tokens."""
    load = server.load()
    kept = files(cache_dir)
    tally["temps_after"] += len(temp_files(cache_dir))
    tally["corrupt"] += load.prefix_cache_disk_corrupt_files
    tally["mismatch_entries"] += load.prefix_cache_disk_entries != len(kept)
    stored = []
    for path in kept:
        tally["files"] += 1
        try:
            stored.append(tuple(read_entry(path, key_file(ctx.log_dir).read_bytes()).tokens))
            tally["intact"] += 1
        except (OSError, BadEntry) as exc:
            log(f"kill: {path.name} is not intact: {exc}")
    survivor = next((ids for ids in previous if any(s[:len(ids) - 1] == tuple(ids[:-1]) for s in stored)), None)
    if survivor is None:
        return
    tally["checked"] += 1
    warm = server.generate(survivor, 8)
    cold = server.generate(survivor, 8, bypass=True)
    tally["hits"] += warm.cached > 0
    tally["equal"] += warm.cached > 0 and warm.tokens == cold.tokens


# Each section: a function (ctx, report) that starts its own servers and adds its own table.
# A quantized-KV section (--kv-bits) is one more entry here, with its options in main().
SECTIONS: dict[str, Callable[[Context, Report], None]] = {"restart": restart, "limit": limit, "kill": kill}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cache_tiers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="generation model (default: the embedded SmolLM2-135M; --quick: the fixture llama)")
    p.add_argument("--quick", action="store_true", help="few, short prompts and kills (CI smoke; figures meaningless)")
    p.add_argument("--only", choices=list(SECTIONS), action="append", help="run this section only (repeatable)")
    p.add_argument("--prompts", type=int, help="distinct prompts of the byte-limit section (default 2000; --quick 40)")
    p.add_argument("--kills", type=int, help="SIGKILL rounds (default 20; --quick 2)")
    p.add_argument("--reps", type=int, help="distinct prompts of the restart section (default 3; --quick 1)")
    p.add_argument("--restart-tokens", type=int, default=4000, help="prompt length of the restart section")
    p.add_argument("--gen-tokens", type=int, default=16, help="greedy tokens per request of the restart section")
    p.add_argument("--disk-bytes", type=int, help="--prefix-cache-disk-bytes of the byte-limit section "
                                                  "(default 128 MiB; --quick 1 MiB)")
    p.add_argument("--entry-bytes", type=int, help="KV bytes per entry of the byte-limit section: sets its "
                                                   "prompt length (default 4 MiB; --quick 64 KiB)")
    p.add_argument("--kill-entry-bytes", type=int, help="KV bytes per entry of the kill section "
                                                        "(default 16 MiB; --quick 256 KiB)")
    p.add_argument("--kill-disk-bytes", type=int, default=512 << 20, help="--prefix-cache-disk-bytes of the kill "
                                                                          "section")
    p.add_argument("--clients", type=int, default=8, help="requests at a time (byte limit, kill)")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    q = args.quick
    args.prompts = args.prompts if args.prompts is not None else (40 if q else 2000)
    args.kills = args.kills if args.kills is not None else (2 if q else 20)
    args.reps = args.reps or (1 if q else 3)
    args.disk_bytes = args.disk_bytes or ((1 << 20) if q else (128 << 20))
    args.entry_bytes = args.entry_bytes or ((64 << 10) if q else (4 << 20))
    args.kill_entry_bytes = args.kill_entry_bytes or ((256 << 10) if q else (16 << 20))
    if q and args.restart_tokens == 4000:
        args.restart_tokens = 1000
    started = time.perf_counter()
    report = Report()
    report.facts.update(machine_facts())
    with tempfile.TemporaryDirectory(prefix="bench-cache-tiers-") as tmp:
        root = Path(tmp)
        if args.model:
            model = Path(args.model)
        elif q:
            from tests.fixtures.models import build_model

            model = build_model("llama", root / "llama")
        else:
            model = default_model()
        ctx = Context(args, model, root, root)
        probe(ctx)
        report.facts["model"] = f"{model.name} (context {ctx.context_length}, KV {ctx.kv_per_token} bytes/token)"
        for name in args.only or SECTIONS:
            log(f"section {name}")
            SECTIONS[name](ctx, report)
    report.publish(" ".join(["python -m bench.cache_tiers", *(argv if argv is not None else sys.argv[1:])]),
                   started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
