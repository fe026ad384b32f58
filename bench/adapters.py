"""Adapters: N streams each with its own LoRA adapter vs N streams on the base model.

    .venv/bin/python -m bench.adapters                      # SmolLM2-135M f32, 8 adapters, ~5 min
    .venv/bin/python -m bench.adapters --quick --model DIR  # small counts (CI smoke)

The adapters are random, shaped as mlx_lm.lora's defaults make them (rank 8, every
linear layer of the last 16 blocks; ``--layers -1``: of every block), written once
under $MLX_GRPC_CACHE/bench. One in-process engine; sides alternate within each
repetition (the first side rotates):

  base          N streams, no adapter loaded
  base+loaded   N streams without adapters while N adapters are loaded (the idle cost)
  adapters      N streams, stream i with adapter i: every decode step mixes N adapters

Aggregate tok/s = all streams' tokens / wall time. Two closer looks follow: one
decode step of N rows (``Batch.step``, each row with its own adapter vs none; steps
alternate, median of ``--steps``), and the two ways to add a batch's per-row deltas
to one [N, 1, hidden] x [hidden, hidden] layer (``mx.gather_mm`` over stacked A/B vs
the dense masked form the engine uses).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import mlx.core as mx

import engine  # noqa: F401  - BLAS before mlx
from engine.events import Delta
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import GenerationRequest, StopOptions, TextPrompt

from .common import Sample, default_model, machine_facts, prepare_f32, ratio, stream_prompt

SIDES = ("base", "base+loaded", "adapters")


def adapter_dirs(model_dir: Path, count: int, layers: int) -> list[Path]:
    from engine.loading.model import cache_root
    from tests.fixtures.adapters import build_adapter

    root = cache_root() / "bench" / f"{model_dir.name}-adapters-r8-l{layers}"
    dirs = [root / f"a{i}" for i in range(count)]
    for i, d in enumerate(dirs):
        if not (d / "adapters.safetensors").is_file():
            build_adapter(model_dir, d, seed=100 + i, rank=8, scale=1.0, num_layers=layers)
    return dirs


async def streams(engine: GenerationEngine, n: int, tokens: int, adapters: list[str], salt: int) -> float:
    """Aggregate tok/s of ``n`` concurrent streams (stream i with ``adapters[i]``)."""

    async def one(i: int) -> int:
        req = GenerationRequest(prompt=TextPrompt(stream_prompt(salt + i)), adapter=adapters[i],
                                stopping=StopOptions(max_tokens=tokens, ignore_eos=True), bypass_prefix_cache=True)
        return sum([len(ev.token_ids) async for ev in engine.generate(req) if isinstance(ev, Delta)])

    start = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(n)))
    return sum(counts) / (time.perf_counter() - start)


async def measure(model_dir: Path, dirs: list[Path], n: int, tokens: int, reps: int) -> dict[str, Sample]:
    config = GenerationConfig(dtype="float32", max_adapters=len(dirs), adapter_root=str(dirs[0].parent),
                              scheduler=SchedulerConfig(max_active=n, max_queued=64))
    eng = GenerationEngine(str(model_dir), name="bench", config=config)
    await eng.start()
    names = [f"a{i}" for i in range(len(dirs))]
    out = {side: Sample() for side in SIDES}
    try:
        for name, d in zip(names, dirs):
            await eng.adapters.load(name, str(d))
        await streams(eng, n, 4, names, 0)  # warm-up with every adapter
        for rep in range(reps):
            order = SIDES[rep % len(SIDES):] + SIDES[:rep % len(SIDES)]
            for side in order:
                loaded = bool(eng.adapters.infos())
                if side == "base" and loaded:
                    for name in names:
                        await eng.adapters.unload(name)
                elif side != "base" and not loaded:
                    for name, d in zip(names, dirs):
                        await eng.adapters.load(name, str(d))
                use = names if side == "adapters" else [""] * n
                out[side].add(await streams(eng, n, tokens, use, 1000 * (rep + 1)))
    finally:
        await eng.close()
    return out


def step_times(model_dir: Path, dirs: list[Path], steps: int) -> dict[str, Sample]:
    """Wall and process CPU seconds per decode step of len(dirs) rows, without adapters
    ("base") and with row i on adapter i ("adapters"). CPU time counts the work done
    whatever else the machine runs; wall time is what streams see."""
    import mlx_lm
    from mlx_lm.models.cache import make_prompt_cache

    from engine.adapters.bank import AdapterBank
    from engine.generation.core.decode.batch import Batch

    model, _ = mlx_lm.load(str(model_dir))
    bank = AdapterBank(model, "bench")
    keys = [bank.load(f"a{i}", str(d)).key for i, d in enumerate(dirs)]
    batch = Batch(model)
    for i in range(len(dirs)):
        caches = make_prompt_cache(model)
        model(mx.array([[1 + i + j for j in range(32)]]), cache=caches)
        batch.join(caches)
    out = {f"{side} {clock}": Sample() for side in ("base", "adapters") for clock in ("wall", "cpu")}
    for _ in range(steps):
        for side, rows in (("base", [""] * len(keys)), ("adapters", keys)):
            wall, cpu = time.perf_counter(), time.process_time()
            with bank.routing.routed(rows):
                mx.eval(batch.forward([[5]] * len(keys)))
            out[f"{side} wall"].add(time.perf_counter() - wall)
            out[f"{side} cpu"].add(time.process_time() - cpu)
            batch.rollback([1] * len(keys))
    return out


def delta_microbench(rows: int = 8, hidden: int = 576, rank: int = 8, reps: int = 200) -> tuple[float, float]:
    """Microseconds per layer to add each row's delta: gather_mm vs the dense masked form."""
    x = mx.random.normal((rows, 1, hidden))
    a = mx.random.normal((rows, hidden, rank))
    b = mx.random.normal((rows, rank, hidden))
    a_cat = a.transpose(1, 0, 2).reshape(hidden, rows * rank)
    b_cat = b.reshape(rows * rank, hidden)
    idx = mx.arange(rows, dtype=mx.uint32)
    mask = mx.repeat(mx.eye(rows), rank, axis=1)[:, None, :]
    y = mx.zeros((rows, 1, hidden))
    mx.eval(x, a, b, a_cat, b_cat, idx, mask, y)
    forms = {"gather_mm": lambda: y + mx.gather_mm(mx.gather_mm(x, a, rhs_indices=idx), b, rhs_indices=idx),
             "dense": lambda: mx.addmm(y, (x @ a_cat) * mask, b_cat)}
    best = {}
    for name, f in forms.items():
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            mx.eval(f())
            times.append(time.perf_counter() - start)
        best[name] = sorted(times)[len(times) // 10] * 1e6
    return best["gather_mm"], best["dense"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.adapters", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="generation model: GGUF file or HF directory (default: embedded SmolLM2-135M)")
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64, help="tokens per stream")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--layers", type=int, default=16, help="blocks each adapter covers (-1: all)")
    p.add_argument("--steps", type=int, default=40, help="decode steps per side in the step comparison")
    p.add_argument("--quick", action="store_true", help="16 tokens, 1 repetition, 4 steps")
    args = p.parse_args(argv)
    if args.quick:
        args.tokens, args.reps, args.steps = 16, 1, 4
    facts = machine_facts()
    model_dir = prepare_f32(args.model or default_model(), lambda m: print(m, flush=True))
    dirs = adapter_dirs(model_dir, args.streams, args.layers)
    gathered, dense = delta_microbench()
    step = step_times(model_dir, dirs, args.steps)
    result = asyncio.run(measure(model_dir, dirs, args.streams, args.tokens, args.reps))
    for k, v in facts.items():
        print(f"{k}: {v}")
    print(f"model: {model_dir}; {args.streams} adapters, rank 8, blocks {args.layers}; "
          f"{args.streams} streams x {args.tokens} tokens x {args.reps} reps\n")
    print("| side | aggregate tok/s | vs base |\n|---|---|---|")
    base = result["base"].median
    for side in SIDES:
        print(f"| {side} | {result[side].fmt()} | {ratio(result[side].median, base)} |")
    print(f"\n| decode step, {args.streams} rows, ms | base | each row its own adapter | tok/s ratio |\n|---|---|---|---|")
    for clock in ("wall", "cpu"):
        base, tuned = step[f"base {clock}"], step[f"adapters {clock}"]
        print(f"| {clock} | {base.fmt(1, 1e3)} | {tuned.fmt(1, 1e3)} | {ratio(base.median, tuned.median)} |")
    print(f"one layer's per-row deltas, batch 8, hidden 576, rank 8: gather_mm {gathered:.0f} us, "
          f"dense masked {dense:.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
