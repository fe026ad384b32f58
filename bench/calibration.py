"""PlanMemory's decode prediction against the decode rate the engine then reaches.

    .venv/bin/python -m bench.calibration                 # the embedded SmolLM2
    .venv/bin/python -m bench.calibration --model DIR|GGUF --trials 5

Each trial starts an engine (which calibrates at load), asks PlanMemory for the rate at
the context a greedy generation reaches, then runs that generation three times. The
ratio predicted / measured is the figure; a machine busy with other work moves both
sides, which is why this is a benchmark and not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys

import engine  # noqa: F401  - BLAS before mlx

from .common import default_model, machine_facts


async def trial(source: str, tokens: int) -> tuple[float, float, list[float]]:
    """(predicted tok/s, median measured tok/s, the three measured rates)."""
    from engine.events import Finished
    from engine.generation.frontend.engine import GenerationEngine
    from engine.requests import GenerationRequest, StopOptions, TextPrompt

    model = GenerationEngine(source, name="calibrated")
    await model.start()
    try:
        rates = []
        for _ in range(3):
            request = GenerationRequest(TextPrompt("Once upon a time"), bypass_prefix_cache=True,
                                        stopping=StopOptions(max_tokens=tokens, ignore_eos=True))
            finished = [e async for e in model.generate(request)][-1]
            if not isinstance(finished, Finished):
                raise RuntimeError(f"the generation ended with {finished!r}")
            rates.append(finished.timings.decode_tokens_per_s)
        plan = await model.plan_memory(finished.usage.prompt_tokens + tokens)
        return plan.predicted_decode_tps, statistics.median(rates), rates
    finally:
        await model.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration", description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a GGUF file or model directory (default: the embedded SmolLM2)")
    parser.add_argument("--trials", type=int, default=3, help="engines started, each calibrated anew")
    parser.add_argument("--tokens", type=int, default=32, help="tokens generated per measurement")
    args = parser.parse_args(argv)
    source = args.model or str(default_model())
    for key, value in machine_facts().items():
        print(f"{key}: {value}")
    print(f"{'trial':>5}  {'predicted':>10}  {'measured':>9}  {'ratio':>6}  rates (tok/s)")
    ratios = []
    for index in range(args.trials):
        predicted, measured, rates = asyncio.run(trial(source, args.tokens))
        ratios.append(predicted / measured)
        print(f"{index + 1:>5}  {predicted:>10.1f}  {measured:>9.1f}  {ratios[-1]:>6.2f}  "
              + " ".join(f"{r:.1f}" for r in rates))
    print(f"median ratio predicted / measured: {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
