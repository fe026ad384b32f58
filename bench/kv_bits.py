"""Quantized KV (``--kv-bits``) against float KV on one model, in one run:

    .venv/bin/python -m bench.kv_bits                  # embedded SmolLM2: 8 and 4 bits
    .venv/bin/python -m bench.kv_bits --quick --model DIR   # a fixture (CI smoke; figures meaningless)

In-process engines (``GenerationEngine``, no gRPC: the KV layout is what differs):
- memory: ``PlanMemory``'s max_safe_context of each side under one memory limit,
  chosen so that float KV fits about ``--float-context`` tokens (below the model's
  context length, which caps every plan): goal >= 3.5x for 8 bits;
- decode: tokens/s of one stream after a ``--context``-token prompt, the sides
  alternated ``--reps`` times: goal >= 0.9x float;
- agreement: greedy tokens of ``--prompts`` prose prompts, position by position
  against float KV: goal >= 95% for 8 bits.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from .common import default_model, long_prompt_ids, machine_facts, ratio
from .report import Report, Row


async def _engine(model: Path, bits: int, memory_limit: int | None = None):
    from engine.generation.config import GenerationConfig, SchedulerConfig
    from engine.generation.frontend.engine import GenerationEngine

    config = GenerationConfig(memory_limit_bytes=memory_limit, memory_reserve_bytes=0 if memory_limit else None,
                              scheduler=SchedulerConfig(kv_bits=bits, prefix_cache_bytes=0))
    engine = GenerationEngine(str(model), name="bench", config=config)
    await engine.start()
    return engine


async def _generate(engine, ids: list[int], tokens: int) -> tuple[list[int], float]:
    """Greedy tokens and the decode rate (tokens after the first, over their time)."""
    from engine.events import Finished, Started
    from engine.requests import GenerationRequest, StopOptions, TokenPrompt

    out, first, last = [], None, None
    request = GenerationRequest(prompt=TokenPrompt(tuple(ids)), stopping=StopOptions(max_tokens=tokens, ignore_eos=True))
    async for event in engine.generate(request):
        if isinstance(event, Finished):
            break
        if not isinstance(event, Started) and event.token_ids:
            last = time.perf_counter()
            first = first or last
            out.extend(event.token_ids)
    rate = (len(out) - 1) / (last - first) if len(out) > 1 and last > first else float("nan")
    return out, rate


async def memory(model: Path, sides: list[int], float_context: int) -> dict[int, tuple[int, int]]:
    """Each side's (max_safe_context, KV bytes per token) under one limit sized for float."""
    probe = await _engine(model, 0)
    try:
        plan = await probe.plan_memory(float_context)  # what float needs for that context, reserve aside
        limit = plan.total_bytes - plan.reserve_bytes
    finally:
        await probe.close()
    out = {}
    for bits in sides:
        engine = await _engine(model, bits, memory_limit=limit)
        try:
            out[bits] = ((await engine.plan_memory(1)).max_safe_context, engine.kv_bytes_per_token)
        finally:
            await engine.close()
    return out


async def decode_and_agreement(model: Path, sides: list[int], context: int, tokens: int, reps: int,
                               prompts: int, answer: int, log) -> tuple[dict, dict]:
    engines = {bits: await _engine(model, bits) for bits in sides}
    try:
        tokenizer = engines[0].loaded.tokenizer
        long_ids = long_prompt_ids(tokenizer, context)
        rates: dict[int, list[float]] = {bits: [] for bits in sides}
        for rep in range(reps):
            order = sides if rep % 2 == 0 else sides[::-1]
            for bits in order:
                _, rate = await _generate(engines[bits], long_ids, tokens)
                rates[bits].append(rate)
                log(f"decode at {context}: {bits or 'float'} bits {rate:.1f} tok/s")
        agree: dict[int, tuple[int, int, list[int]]] = {}
        for i in range(prompts):
            ids = long_prompt_ids(tokenizer, 200 + 150 * i, salt=f"Passage {i}. ")
            reference, _ = await _generate(engines[0], ids, answer)
            for bits in sides[1:]:
                mine, _ = await _generate(engines[bits], ids, answer)
                same = sum(a == b for a, b in zip(mine, reference))
                first = next((j for j, (a, b) in enumerate(zip(mine, reference)) if a != b), len(reference))
                total, hits, firsts = agree.get(bits, (0, 0, []))
                agree[bits] = (total + len(reference), hits + same, firsts + [first])
        return {b: statistics.median(r) for b, r in rates.items()}, agree
    finally:
        for engine in engines.values():
            await engine.close()


def _name(bits: int) -> str:
    return f"{bits}-bit" if bits else "float"


async def run(args) -> int:
    started = time.perf_counter()
    model = Path(args.model) if args.model else default_model()
    sides = [0, *args.bits]
    report = Report()
    report.facts.update(machine_facts())
    report.facts["model"] = str(model)
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    mem = await memory(model, sides, args.float_context)
    rates, agree = await decode_and_agreement(model, sides, args.context, args.tokens, args.reps, args.prompts,
                                              args.answer, log)
    t = report.table("Quantized KV against float KV (same model, same run)", "quantized", "float")
    for bits in args.bits:
        safe, per_token = mem[bits]
        base_safe, base_token = mem[0]
        goal = " (goal >= 3.5x)" if bits == 8 else ""
        t.append(Row(f"{_name(bits)}: KV bytes per token", f"{per_token}", f"{base_token}",
                     ratio(base_token, per_token), "float / quantized"))
        t.append(Row(f"{_name(bits)}: max_safe_context, one memory limit", f"{safe}", f"{base_safe}",
                     ratio(safe, base_safe), f"limit sized for ~{args.float_context} float tokens{goal}"))
        goal = " (goal >= 0.9x)" if bits == 8 else ""
        t.append(Row(f"{_name(bits)}: decode tok/s at {args.context} tokens of context", f"{rates[bits]:.1f}",
                     f"{rates[0]:.1f}", ratio(rates[bits], rates[0]),
                     f"median of {args.reps}, {args.tokens} tokens{goal}"))
        total, hits, firsts = agree[bits]
        goal = " (goal >= 95%)" if bits == 8 else ""
        t.append(Row(f"{_name(bits)}: greedy positions equal to float's", f"{hits}/{total}",
                     f"{100 * hits / max(total, 1):.1f}%", "",
                     f"{args.prompts} prompts x {args.answer} tokens; first divergence at {firsts}{goal}"))
    report.publish(" ".join(["python -m bench.kv_bits", *sys.argv[1:]]), started, args.markdown, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kv_bits", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a model directory or GGUF file (default: the embedded SmolLM2)")
    p.add_argument("--bits", type=int, nargs="+", default=[8, 4], choices=(8, 4))
    p.add_argument("--context", type=int, default=4000, help="prompt tokens before the decode measure")
    p.add_argument("--tokens", type=int, default=64, help="tokens decoded per measure")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--float-context", type=int, default=2000,
                   help="context float KV fits under the memory limit of the memory measure")
    p.add_argument("--prompts", type=int, default=8, help="prompts of the agreement measure")
    p.add_argument("--answer", type=int, default=48, help="greedy tokens per prompt of the agreement measure")
    p.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--out", help="also write the report here")
    args = p.parse_args(argv)
    if args.quick:
        args.context, args.tokens, args.reps, args.prompts, args.answer, args.float_context = 300, 8, 1, 2, 8, 200
    import engine  # noqa: F401  - BLAS before mlx

    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
