"""Grammar proposals in the speculation bench, one stream, greedy: the structured-output
tests' 20 JSON Schema extractions on SmolLM2, and forced tool calls (tool_choice
REQUIRED, bench.tools' prompt and tools) on the tools-qwen fixture with SmolLM2's
shapes. Speculation off against the default (n-gram) with grammar proposals, and the
default without them (a second engine on the same weights), alternated; every side
must give the same text."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

from engine.generation.config import GenerationConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import (
    ChatMessage,
    ChatPrompt,
    FormatKind,
    GenerationRequest,
    ResponseFormat,
    SpeculationMode,
    SpeculationOptions,
    StopOptions,
    TokenPrompt,
    ToolChoiceMode,
)
from tests.structured_prompts import EXTRACTIONS

from .common import ratio
from .report import Report, Row
from .run import log
from .spec_timed import timed

SYSTEM = "Extract the information from the user's text as JSON."


def tool_call(city: str) -> GenerationRequest:
    from .tools import TOOLS

    prompt = ChatPrompt((ChatMessage("user", f"What is the weather in {city} this week?"),), tools=TOOLS,
                        tool_choice=ToolChoiceMode.REQUIRED, enable_thinking=False)
    return GenerationRequest(prompt, stopping=StopOptions(max_tokens=96), bypass_prefix_cache=True)


async def compare(engine: GenerationEngine, requests: list[GenerationRequest], rounds: int, report: Report,
                  title: str) -> None:
    """Off, n-gram + grammar and n-gram alone on ``requests``, alternated, into one table."""
    config = dataclasses.replace(engine.config, draft_model=None, speculation=dataclasses.replace(
        engine.config.speculation, grammar_proposals=False))
    plain = GenerationEngine(engine.source, name="no-proposals", config=config)
    await plain.start()
    sides = {"off": (engine, SpeculationMode.OFF), "n-gram + grammar": (engine, SpeculationMode.DEFAULT),
             "n-gram alone": (plain, SpeculationMode.DEFAULT)}
    tokens = {side: 0 for side in sides}
    seconds = {side: 0.0 for side in sides}
    drafted = {side: [0, 0] for side in sides}
    same = True
    try:
        for req in requests:
            want = None
            for _ in range(rounds):
                for side, (eng, mode) in sides.items():
                    r = await timed(eng, dataclasses.replace(req, speculation=SpeculationOptions(mode)))
                    want = r.tokens if want is None else want
                    same = same and r.tokens == want
                    tokens[side] += len(r.tokens) - 1
                    seconds[side] += r.seconds
                    drafted[side][0] += r.usage.draft_tokens
                    drafted[side][1] += r.usage.accepted_draft_tokens
    finally:
        await plain.close()
    rate = {side: tokens[side] / seconds[side] if seconds[side] else float("nan") for side in sides}
    log(f"{title}: " + ", ".join(f"{side} {r:.1f}" for side, r in rate.items()) + " tok/s")
    table = report.table(f"{title}, 1 stream (decode tok/s over all, greedy)", "speculating", "off")
    for side in list(sides)[1:]:
        table.append(Row(side, f"{rate[side]:.1f}", f"{rate['off']:.1f}", ratio(rate[side], rate["off"]),
                         f"accepted {drafted[side][1]}/{drafted[side][0]}; same text on every side: "
                         f"{'yes' if same else 'NO'}"))


async def grammar_rows(engine: GenerationEngine, tok, report: Report, count: int = 20, rounds: int = 2) -> None:
    def extraction(schema: dict, text: str) -> GenerationRequest:
        ids = tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
                                      add_generation_prompt=True)
        return GenerationRequest(TokenPrompt(tuple(ids)), stopping=StopOptions(max_tokens=256),
                                 response_format=ResponseFormat(FormatKind.JSON_SCHEMA, json.dumps(schema)),
                                 bypass_prefix_cache=True)

    await compare(engine, [extraction(s, t) for s, t in EXTRACTIONS[:count]], rounds, report,
                  f"grammar proposals, {count} JSON Schema extractions")
    from .tools import CITIES, fixture

    with tempfile.TemporaryDirectory() as tmp:
        tools = GenerationEngine(str(fixture(Path(tmp), quick=count < 20)), name="tools", config=GenerationConfig())
        await tools.start()
        try:
            await compare(tools, [tool_call(c) for c in CITIES[: max(2, count // 4)]], rounds, report,
                          "grammar proposals, forced tool calls (tools-qwen fixture)")
        finally:
            await tools.close()
