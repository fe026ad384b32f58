"""Does overlapping host and device work speed decode up here? mlx-lm's own loop
(``generate_step``, which queues step n+1 with ``mx.async_eval`` before reading step
n) against the same loop with a plain ``mx.eval``, alternated in one run, single
stream, on the same float32 weights.

    .venv/bin/python -m bench.pipelining            # SmolLM2-135M (embedded), ~1 min
    .venv/bin/python -m bench.pipelining --model DIR --tokens 256 --reps 6
"""

from __future__ import annotations

if __package__ in (None, ""):
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import argparse
import importlib
import time
import types

import engine  # noqa: F401  - BLAS before mlx
import mlx.core as mx

from .common import Sample, default_model, machine_facts, prepare_f32, ratio
from .report import Report, Row
from .run import log

WARMUP = 8  # tokens before the clock starts
PROMPT = "Write a long story about a lighthouse keeper and the sea."


def _decode_rate(generate, prompt: mx.array, model, tokens: int) -> float:
    start, produced = 0.0, 0
    for _ in generate.generate_step(prompt, model, max_tokens=tokens + WARMUP):
        produced += 1
        if produced == WARMUP:
            start = time.perf_counter()
    return (produced - WARMUP) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="GGUF file or HF directory (default: embedded SmolLM2-135M)")
    parser.add_argument("--tokens", type=int, default=128, help="decoded tokens timed per repetition")
    parser.add_argument("--reps", type=int, default=4, help="repetitions of each side (alternated)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)

    from engine.loading.model import load_generation_model

    loaded = load_generation_model(prepare_f32(args.model or default_model(), log), dtype="float32",
                                   use_kernels=False)
    prompt = mx.array(loaded.tokenizer.encode(PROMPT))
    generate = importlib.import_module("mlx_lm.generate")
    synchronous = types.SimpleNamespace(**{k: getattr(mx, k) for k in dir(mx) if not k.startswith("__")})
    synchronous.async_eval = mx.eval
    pipelined, plain = Sample(), Sample()
    try:
        for _ in range(args.reps):
            generate.mx = mx
            pipelined.add(_decode_rate(generate, prompt, loaded.model, args.tokens))
            generate.mx = synchronous
            plain.add(_decode_rate(generate, prompt, loaded.model, args.tokens))
    finally:
        generate.mx = mx
    report = Report()
    report.facts.update(machine_facts())
    report.facts["model"] = str(loaded.artifact)
    rows = report.table("Decode pipelining in mlx-lm's own loop", "async_eval (pipelined)", "mx.eval (plain)")
    rows.append(Row(f"decode tok/s, 1 stream, {args.tokens} tokens", pipelined.fmt(), plain.fmt(),
                    ratio(pipelined.median, plain.median), "step n+1 queued before step n is read, or not"))
    print(report.render(markdown=args.markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
