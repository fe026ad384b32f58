"""Our server against llama.cpp's own server at a realistic size: Llama-3.2-shaped GGUF
files (bench/real_models.py: random weights, SmolLM2's tokenizer) in each type.

    .venv/bin/python -m bench.real_size [--size 1b] [--types Q4_K_M,Q8_0,Q4_0] [--streams 1,8,32] [--tokens 128]

For each file: ours (``serve`` over gRPC, speculation off, prefix cache bypassed) and
``llama-server -m FILE -np 32 -cb -t <cores>`` (``/completion``, cache_prompt off) both
load it; at each streams count, N distinct ~100-token prompts (the same ids to both sides)
each generate ``--tokens`` greedy tokens with EOS ignored. The sides are never busy at
once and take turns going first. Reported per count: aggregate tok/s (all tokens / the
wall time of the batch) and TTFT p50, each side and ours / llama-server; then
llama-bench's kernel figures on the file (``-p 1000 -n 128``, one stream, no server).
Needs ``python -m bench.llamacpp build`` (with llama-server); says how and skips otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .common import Sample, long_prompt_ids, machine_facts, percentile, ratio, rotated
from .report import Report, Row, ms

ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")


def log(msg: str) -> None:
    print(f"[real_size {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cpu_flags() -> str:
    """The CPU's vector ISA flags (of ISA_FLAGS) from /proc/cpuinfo."""
    try:
        flags = next((set(line.split(":", 1)[1].split()) for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), set())
    except OSError:
        flags = set()
    return " ".join(f for f in ISA_FLAGS if f in flags) or "-"


def prompts(tokenizer, n: int, rep: int, length: int) -> list[list[int]]:
    """``n`` distinct prompts of ``length`` token ids (distinct per stream, count and rep)."""
    return [long_prompt_ids(tokenizer, length, salt=f"Stream {i} of {n}, round {rep}. ") for i in range(n)]


async def compare(args, file: Path, tokenizer, log_dir: Path) -> dict:
    """Ours and llama-server on ``file`` at each streams count: aggregate tok/s and TTFTs."""
    from .llama_server import LlamaServer
    from .servers import OurServer

    ours = OurServer(file, None, log_dir, max_active=max(args.streams), extra=args.serve_arg)
    theirs = LlamaServer(file, log_dir, slots=max(32, max(args.streams)), threads=args.threads,
                         context_per_slot=args.prompt_tokens + args.tokens + 64)
    out: dict = {"llama_server_argv": " ".join(theirs.argv[1:])}
    sides = {"ours": ours, "llama": theirs}
    try:
        log(f"{file.name}: starting our server (a first load converts the file), then llama-server")
        await ours.start(timeout=3600)
        out["ours_dtype"] = (await ours.info()).info.dtype
        await theirs.start()
        warm = prompts(tokenizer, 4, -1, args.prompt_tokens)
        for name, side in sides.items():
            await side.generate(tokens=8, ids=warm[0])
            await asyncio.gather(*(side.generate(tokens=8, ids=p) for p in warm))
        for n in args.streams:
            log(f"  {n} streams x {args.tokens} tokens x {args.reps}")
            for rep in range(args.reps):
                batch = prompts(tokenizer, n, rep, args.prompt_tokens)
                for name in rotated(list(sides), rep):
                    side = sides[name]
                    kw = {"bypass": True} if name == "ours" else {}
                    start = time.perf_counter()
                    rs = await asyncio.gather(*(side.generate(tokens=args.tokens, ids=p, **kw) for p in batch))
                    end = max(r.done for r in rs)
                    got = out.setdefault(f"{name}_{n}", {"agg": Sample(), "ttft": [], "tokens": []})
                    got["agg"].add(sum(r.tokens for r in rs) / (end - start))
                    got["ttft"] += [r.ttft for r in rs if r.first]
                    got["tokens"] += [r.tokens for r in rs]
            log("    " + ", ".join(f"{k} {out[f'{k}_{n}']['agg'].fmt()} tok/s, TTFT p50 "
                                   f"{ms(percentile(out[f'{k}_{n}']['ttft'], 50))} ms" for k in sides))
    finally:
        await ours.close()
        await theirs.close()
    return out


def tables(report: Report, args, results: dict) -> None:
    for kind, r in results.items():
        size = r["file_bytes"] / 2**30
        t = report.table(f"{r['file']} ({args.size}, {kind}, {size:.2f} GiB)", "ours", "llama-server")
        for n in args.streams:
            o, a = r.get(f"ours_{n}"), r.get(f"llama_{n}")
            if not o or not a:
                continue
            tokens = sorted(set(o["tokens"] + a["tokens"]))
            streams = f"{n} stream{'s' * (n > 1)}"
            t.append(Row(f"{streams}: aggregate tok/s ({args.tokens} tok each)", o["agg"].fmt(), a["agg"].fmt(),
                         ratio(o["agg"].median, a["agg"].median),
                         f"tokens/stream {tokens[0]}-{tokens[-1]}; ratio ours / llama-server"))
            po, pa = percentile(o["ttft"], 50), percentile(a["ttft"], 50)
            t.append(Row(f"{streams}: TTFT p50 ms", ms(po), ms(pa), ratio(po, pa), "lower is better"))
        if "bench" in r:
            b = r["bench"]
            t.append(Row(f"llama-bench prefill tok/s (pp{args.bench_prompt})", "", f"{b['prefill']:.1f}",
                         note="kernels only: one stream, no server"))
            t.append(Row(f"llama-bench decode tok/s (tg{args.bench_tokens})", "", f"{b['decode']:.1f}",
                         note=f"-t {args.threads}"))
        if "ours_dtype" in r:
            t.append(Row("weights held", r["ours_dtype"], kind, note="ours: GGUF blocks kept quantized"))


async def run(args, report: Report, log_dir: Path) -> dict:
    from transformers import AutoTokenizer

    from engine.loading.embedded import default_generation_model
    from engine.loading.model import resolve_artifact

    from . import llamacpp, real_models

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_artifact(default_generation_model())))
    results: dict = {}
    for kind in args.types:
        file = real_models.make(args.size, kind, log=log)
        r = results[kind] = {"file": file.name, "file_bytes": file.stat().st_size}
        r.update(await compare(args, file, tokenizer, log_dir))
        if args.bench_reps:
            log(f"  llama-bench -p {args.bench_prompt} -n {args.bench_tokens} -r {args.bench_reps}")
            r["bench"] = llamacpp.bench_file(file, args.bench_prompt, args.bench_tokens, args.threads,
                                             args.bench_reps)
            log(f"    {r['bench']}")
    return results


def main(argv: list[str] | None = None) -> int:
    from . import llamacpp, real_models

    p = argparse.ArgumentParser(prog="python -m bench.real_size", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(real_models.SHAPES), default="1b")
    p.add_argument("--types", default=",".join(real_models.TYPES), help="GGUF types (F16 too)")
    p.add_argument("--streams", default="1,8,32", help="comma-separated concurrent stream counts")
    p.add_argument("--tokens", type=int, default=128, help="tokens each stream generates")
    p.add_argument("--prompt-tokens", type=int, default=100, help="prompt length of each stream")
    p.add_argument("--reps", type=int, default=2, help="repetitions per streams count and side")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="llama-server's and llama-bench's -t")
    p.add_argument("--bench-prompt", type=int, default=1000, help="llama-bench -p")
    p.add_argument("--bench-tokens", type=int, default=128, help="llama-bench -n")
    p.add_argument("--bench-reps", type=int, default=2, help="llama-bench -r (0: no llama-bench rows)")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                   help="an extra flag for our server's `serve` (repeatable), e.g. --serve-arg=--dtype=float16")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--out", help="also write the report to this file")
    p.add_argument("--json", help="write raw figures (JSON) to this file")
    args = p.parse_args(argv)
    args.types = [t.strip() for t in args.types.split(",") if t.strip()]
    args.streams = [int(s) for s in args.streams.split(",") if s.strip()]
    if not (llamacpp.built() and llamacpp.server_built()):
        print("llama.cpp (with llama-server) is not built: .venv/bin/python -m bench.llamacpp build "
              "(by hand, once; 10-20+ min on 2 cores). Skipped.", file=sys.stderr)
        return 0
    from .llama_server import version

    started = time.perf_counter()
    report = Report()
    report.facts.update(machine_facts())
    report.facts["CPU ISA flags"] = cpu_flags()
    report.facts["llama-server"] = (f"{version()} ({llamacpp.SDIST}); -np {max(32, max(args.streams))} -cb "
                                    f"-t {args.threads}")
    report.facts["model"] = (f"{real_models.SHAPES[args.size].name}, random weights, SmolLM2 tokenizer; "
                             f"{args.prompt_tokens}-token prompts, greedy, EOS ignored; ours: speculation off")
    with tempfile.TemporaryDirectory(prefix="bench-real-size-") as tmp:
        log_dir = Path(os.environ.get("BENCH_LOG_DIR") or tmp)
        try:
            results = asyncio.run(run(args, report, log_dir))
        except Exception:
            for f in log_dir.glob("*.log"):
                print(f"--- {f.name} (tail)\n{f.read_text()[-2000:]}", file=sys.stderr)
            raise
    report.facts["load average at end"] = "%.2f %.2f %.2f" % os.getloadavg()
    tables(report, args, results)
    report.publish(" ".join(["python -m bench.real_size", *(argv if argv is not None else sys.argv[1:])]),
                   started, args.markdown, args.out)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {k: {kk: (vv.values if isinstance(vv, Sample) else
                      {x: (y.values if isinstance(y, Sample) else y) for x, y in vv.items()} if isinstance(vv, dict)
                      else vv) for kk, vv in v.items()} for k, v in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
