"""Tool choice's cost in one run: streams whose call is enforced by the grammar
(tool_choice REQUIRED, parallel calls) vs the same streams free (NONE), same prompt
with the same tools rendered, same number of tokens.

    .venv/bin/python -m bench.tools --markdown     # a SmolLM2-shaped tool fixture, ~2 min
    .venv/bin/python -m bench.tools --quick        # the tiny test fixture (CI smoke)

The model is the tools-qwen fixture (Qwen-style template and markers, random weights)
built with SmolLM2-135M's layer shapes (30 layers, hidden 576; its vocabulary is the
fixture's 640 tokens, so a mask costs less than on a 49k vocabulary: bench.structured
measures that on SmolLM2 itself), or --model, any tool-capable checkpoint. Enforced
rows write call after call (random weights never pick the end token), free rows
ignore EOS, so both sides run exactly --tokens steps per stream; sides alternate inside
each repetition; figures are median [min-max].
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
import tempfile
import time
from pathlib import Path

import engine  # noqa: F401  - BLAS before mlx
from engine.events import Delta, Finished
from engine.generation.config import GenerationConfig, SchedulerConfig, SpeculationConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import (
    ChatMessage,
    ChatPrompt,
    GenerationRequest,
    SamplingOptions,
    SpeculationMode,
    StopOptions,
    Tool,
    ToolChoiceMode,
)

from .common import Sample, machine_facts, ratio
from .report import Report, Row
from .run import log

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 14}},
          "required": ["city", "days"]}
TOOLS = (Tool("get_weather", "The forecast for a city", json.dumps(SCHEMA)),
         Tool("get_time", "The local time in a city", json.dumps({"type": "object", "properties": {
             "city": {"type": "string", "maxLength": 24}}, "required": ["city"]})))
CITIES = ["Paris", "Oslo", "Lima", "Kyoto", "Cairo", "Quito", "Perth", "Riga"]


def fixture(root: Path, quick: bool) -> Path:
    from tests.fixtures.chat_models import build_chat_model
    from tests.fixtures.models import ModelSpec

    spec = None if quick else ModelSpec(model_type="llama", hidden_size=576, num_hidden_layers=30,
                                        intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
                                        head_dim=64)
    return build_chat_model("qwen", root / "tools-qwen", spec=spec)


async def one(eng: GenerationEngine, city: str, tokens: int, enforced: bool) -> int:
    prompt = ChatPrompt((ChatMessage("user", f"What is the weather in {city} this week?"),), tools=TOOLS,
                        tool_choice=ToolChoiceMode.REQUIRED if enforced else ToolChoiceMode.NONE,
                        enable_thinking=False)
    no_end = {i: -1e9 for i in eng.loaded.eos_ids}  # both sides run exactly ``tokens`` steps
    req = GenerationRequest(prompt, sampling=SamplingOptions(logit_bias=no_end),
                            stopping=StopOptions(max_tokens=tokens), bypass_prefix_cache=True)
    count = 0
    async for ev in eng.generate(req):
        if isinstance(ev, Delta):
            count += len(ev.token_ids)
        elif isinstance(ev, Finished) and ev.reason.value != "length":
            raise RuntimeError(f"a stream ended early ({ev.reason}): the comparison needs equal work")
    return count


async def streams(eng: GenerationEngine, n: int, tokens: int, enforced: bool) -> float:
    start = time.perf_counter()
    counts = await asyncio.gather(*(one(eng, CITIES[i % len(CITIES)], tokens, enforced) for i in range(n)))
    return sum(counts) / (time.perf_counter() - start)


async def run(args) -> Report:
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(args.model) if args.model else fixture(Path(tmp), args.quick)
        eng = GenerationEngine(str(model), name="tools", config=GenerationConfig(
            scheduler=SchedulerConfig(max_active=max(args.streams)),
            speculation=SpeculationConfig(mode=SpeculationMode(args.speculation))))
        await eng.start()
        report = Report()
        report.facts.update(machine_facts())
        report.facts.update({"model": "tools-qwen fixture" + (" (tiny)" if args.quick else ", SmolLM2-135M shapes")
                             if not args.model else str(model), "vocabulary": str(eng.loaded.vocab_size),
                             "tokens per stream": str(args.tokens), "speculation": args.speculation})
        try:
            await one(eng, "Paris", 8, True)  # warm-up: the grammar's compile is cached by its text
            for n in args.streams:
                rates = {True: Sample(), False: Sample()}
                for rep in range(args.reps):
                    for enforced in ((True, False) if rep % 2 else (False, True)):
                        rates[enforced].add(await streams(eng, n, args.tokens, enforced))
                    log(f"{n} streams, rep {rep + 1}: enforced {rates[True].values[-1]:.1f}, "
                        f"free {rates[False].values[-1]:.1f} tok/s")
                table = report.table(f"{n} stream(s): tool_choice REQUIRED (grammar) vs NONE (free)", "enforced",
                                     "free")
                on, off = rates[True], rates[False]
                table.append(Row("aggregate tok/s", on.fmt(), off.fmt(), ratio(on.median, off.median),
                                 "same prompt and tools, same number of tokens"))
        finally:
            await eng.close()
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tools", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a tool-capable model (default: the tools-qwen fixture, SmolLM2-shaped)")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 8], help="concurrent streams per side")
    p.add_argument("--tokens", type=int, default=64, help="tokens generated per stream")
    p.add_argument("--reps", type=int, default=3, help="repetitions (sides alternate inside each)")
    p.add_argument("--speculation", choices=("off", "ngram"), default="off",
                   help="speculation on both sides (off: the grammar's cost alone; ngram: repeated calls draft well)")
    p.add_argument("--quick", action="store_true", help="the tiny fixture, 32 tokens, 2 repetitions")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.tokens, args.reps = 32, 2
    started = time.perf_counter()
    report = asyncio.run(run(args))
    command = "python -m bench.tools " + " ".join(sys.argv[1:] if argv is None else argv)
    report.publish(command, started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
