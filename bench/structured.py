"""Structured output's cost in one run: 8 streams constrained by a JSON Schema vs the
same 8 streams free, and the time token masks take.

    .venv/bin/python -m bench.structured --markdown     # SmolLM2-135M f32, ~3 min
    .venv/bin/python -m bench.structured --quick        # fewer tokens and repetitions

Both sides run the same chat prompts through the in-process engine, greedy (and
without speculation unless ``--speculation ngram``), and
generate exactly ``--tokens`` tokens per stream: free rows ignore EOS, constrained
rows follow a schema that cannot be complete sooner (an array of at least 40
strings), so both do the same number of steps. Sides alternate inside each
repetition; figures are median [min-max]. Mask time is the engine's own count
(filling every constrained row's bitmask and expanding it into a bias, host time)
divided by the constrained tokens, and as a share of the constrained side's wall
time (a figure that shared-machine noise moves far less than tok/s); applying the
bias is an mx add inside the step, timed separately on [8, vocab].
"""

from __future__ import annotations

if __package__ in (None, ""):
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import argparse
import asyncio
import json
import sys
import time

import mlx.core as mx
import numpy as np

import engine  # noqa: F401  - BLAS before mlx
from engine.events import Delta, Finished
from engine.generation.config import GenerationConfig, SchedulerConfig, SpeculationConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.generation.grammar.compiler import Grammars, grammar_tokenizer
from engine.generation.grammar.masks import SiteMasks
from engine.requests import FormatKind, GenerationRequest, ResponseFormat, SpeculationMode, StopOptions, TokenPrompt

from .common import Sample, default_model, machine_facts, prepare_f32, ratio
from .report import Report, Row
from .run import log

SCHEMA = {"type": "object", "required": ["topic", "notes"], "additionalProperties": False,
          "properties": {"topic": {"type": "string", "maxLength": 40},
                         "notes": {"type": "array", "minItems": 40, "items": {"type": "string", "maxLength": 60}}}}
TOPICS = ["the moon", "bicycles", "bread", "volcanoes", "chess", "rivers", "bees", "trains"]


def prompts(tokenizer, n: int) -> list[list[int]]:
    return [tokenizer.apply_chat_template(
        [{"role": "system", "content": "Answer with a JSON object of notes."},
         {"role": "user", "content": f"Write many short notes about {TOPICS[i % len(TOPICS)]}."}],
        add_generation_prompt=True) for i in range(n)]


async def one(eng: GenerationEngine, ids: list[int], tokens: int, constrained: bool) -> int:
    fmt = ResponseFormat(FormatKind.JSON_SCHEMA, json.dumps(SCHEMA)) if constrained else None
    req = GenerationRequest(TokenPrompt(tuple(ids)), stopping=StopOptions(max_tokens=tokens, ignore_eos=True),
                            bypass_prefix_cache=True, response_format=fmt)
    count = 0
    async for ev in eng.generate(req):
        if isinstance(ev, Delta):
            count += len(ev.token_ids)
        elif isinstance(ev, Finished) and constrained and ev.reason.value != "length":
            raise RuntimeError(f"a constrained stream ended early ({ev.reason}): the comparison needs equal work")
    return count


async def streams(eng: GenerationEngine, batch: list[list[int]], tokens: int,
                  constrained: bool) -> tuple[float, float]:
    """(aggregate tok/s, seconds) of one side's streams, all at once."""
    start = time.perf_counter()
    counts = await asyncio.gather(*(one(eng, ids, tokens, constrained) for ids in batch))
    elapsed = time.perf_counter() - start
    return sum(counts) / elapsed, elapsed


def apply_seconds(vocab: int, rows: int, reps: int = 50) -> float:
    """Seconds to apply a [rows, vocab] mask bias to scores (mx add, evaluated), per call."""
    bits = np.random.default_rng(0).integers(-(2**31), 2**31 - 1, (rows, (vocab + 31) // 32)).astype(np.int32)
    masks, scores = SiteMasks(bits, vocab), mx.random.normal((rows, vocab))
    mx.eval(scores, masks.apply(scores))
    start = time.perf_counter()
    for _ in range(reps):
        mx.eval(masks.apply(scores))
    return (time.perf_counter() - start) / reps


async def compile_seconds(eng: GenerationEngine) -> tuple[float, float]:
    """Seconds to compile SCHEMA on a fresh ``Grammars`` of the model, then from its cache."""
    loaded = eng.loaded
    grammars = Grammars(grammar_tokenizer(loaded.tokenizer, loaded.vocab_size, loaded.eos_ids))
    fmt, times = ResponseFormat(FormatKind.JSON_SCHEMA, json.dumps(SCHEMA)), []
    try:
        for _ in range(2):
            start = time.perf_counter()
            await grammars.constrain(fmt)
            times.append(time.perf_counter() - start)
    finally:
        grammars.close()
    return times[0], times[1]


async def run(args) -> Report:
    model_dir = prepare_f32(args.model or default_model(), log)
    config = GenerationConfig(dtype="float32", scheduler=SchedulerConfig(max_active=args.streams),
                              speculation=SpeculationConfig(mode=SpeculationMode(args.speculation)))
    eng = GenerationEngine(str(model_dir), name="bench", config=config)
    await eng.start()
    report = Report()
    report.facts.update(machine_facts())
    report.facts.update({"model": str(model_dir), "streams": str(args.streams), "tokens per stream": str(args.tokens),
                         "speculation": args.speculation})
    batch = prompts(eng.loaded.tokenizer, args.streams)
    rates, spent = {True: Sample(), False: Sample()}, {True: 0.0, False: 0.0}
    try:
        compile_s = await compile_seconds(eng)
        await one(eng, batch[0], 4, True)  # warm-up
        before = (eng.grammar_stats.mask_seconds, eng.grammar_stats.masked_tokens)
        for rep in range(args.reps):
            for constrained in ((True, False) if rep % 2 else (False, True)):
                rate, elapsed = await streams(eng, batch, args.tokens, constrained)
                rates[constrained].add(rate)
                spent[constrained] += elapsed
            log(f"rep {rep + 1}: schema {rates[True].values[-1]:.1f}, free {rates[False].values[-1]:.1f} tok/s")
        stats = eng.grammar_stats
        seconds, sites = stats.mask_seconds - before[0], stats.masked_tokens - before[1]
        vocab = eng.loaded.vocab_size
    finally:
        await eng.close()
    table = report.table(f"{args.streams} streams, JSON Schema vs free (greedy, {args.tokens} tokens each)",
                         "json schema", "free")
    on, off = rates[True], rates[False]
    table.append(Row("aggregate tok/s", on.fmt(), off.fmt(), ratio(on.median, off.median),
                     "same prompts, same number of tokens"))
    table.append(Row("mask fill + expand per constrained token (engine count)", f"{seconds / sites * 1e6:.0f} us",
                     note=f"{sites} tokens, {seconds:.2f} s of host time: {seconds / spent[True]:.1%} of the "
                          f"constrained side's {spent[True]:.0f} s"))
    apply = apply_seconds(vocab, args.streams)
    table.append(Row(f"mask apply per step ([{args.streams}, {vocab}] bias, mx add)", f"{apply * 1e6:.0f} us",
                     note=f"{apply / args.streams * 1e6:.0f} us per row"))
    table.append(Row("compiling the schema: first / cached", f"{compile_s[0] * 1e3:.1f} / {compile_s[1] * 1e3:.2f} ms",
                     note="off the engine thread; includes the first token mask"))
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.structured", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model (default: embedded SmolLM2-135M, as float32)")
    p.add_argument("--streams", type=int, default=8, help="concurrent streams per side")
    p.add_argument("--tokens", type=int, default=64, help="tokens generated per stream")
    p.add_argument("--reps", type=int, default=4, help="repetitions (sides alternate inside each)")
    p.add_argument("--speculation", choices=("off", "ngram"), default="off",
                   help="the server's speculation mode on both sides (off: the mask cost alone)")
    p.add_argument("--quick", action="store_true", help="32 tokens, 2 repetitions")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.tokens, args.reps = 32, 2
    started = time.perf_counter()
    report = asyncio.run(run(args))
    command = "python -m bench.structured " + " ".join(sys.argv[1:] if argv is None else argv)
    report.publish(command, started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
