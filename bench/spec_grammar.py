"""Grammar proposals in the speculation bench: the structured-output tests' 20 JSON
Schema extractions on SmolLM2, one stream, greedy. Speculation off against the
default (n-gram) with grammar proposals, and the default without them (a second
engine on the same weights), alternated; every side must give the same text."""

from __future__ import annotations

import dataclasses
import json
import time

from engine.events import Delta, Finished
from engine.generation.config import GenerationConfig, SpeculationConfig
from engine.generation.engine import GenerationEngine
from engine.requests import (FormatKind, GenerationRequest, ResponseFormat, SpeculationMode, SpeculationOptions,
                             StopOptions, TokenPrompt)
from tests.structured_prompts import EXTRACTIONS

from .common import ratio
from .report import Report, Row
from .run import log

SYSTEM = "Extract the information from the user's text as JSON."


async def extract(engine: GenerationEngine, ids: list[int], schema: dict, mode: SpeculationMode):
    """(text tokens, seconds from the first token to the last, usage) of one extraction."""
    req = GenerationRequest(TokenPrompt(tuple(ids)), stopping=StopOptions(max_tokens=256),
                            response_format=ResponseFormat(FormatKind.JSON_SCHEMA, json.dumps(schema)),
                            speculation=SpeculationOptions(mode), bypass_prefix_cache=True)
    out, first, last, usage = [], 0.0, 0.0, None
    async for ev in engine.generate(req):
        if isinstance(ev, Delta) and ev.token_ids:
            last = time.perf_counter()
            first = first or last
            out += ev.token_ids
        elif isinstance(ev, Finished):
            usage = ev.usage
    return out, last - first, usage


async def grammar_rows(engine: GenerationEngine, tok, report: Report, count: int = 20, rounds: int = 2) -> None:
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
        for schema, text in EXTRACTIONS[:count]:
            ids = tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
                                          add_generation_prompt=True)
            want = None
            for _ in range(rounds):
                for side, (eng, mode) in sides.items():
                    out, took, usage = await extract(eng, ids, schema, mode)
                    want = out if want is None else want
                    same = same and out == want
                    tokens[side] += len(out) - 1
                    seconds[side] += took
                    drafted[side][0] += usage.draft_tokens
                    drafted[side][1] += usage.accepted_draft_tokens
    finally:
        await plain.close()
    rate = {side: tokens[side] / seconds[side] if seconds[side] else float("nan") for side in sides}
    log("grammar proposals: " + ", ".join(f"{side} {r:.1f}" for side, r in rate.items()) + " tok/s")
    table = report.table(f"grammar proposals, {count} JSON Schema extractions, 1 stream (decode tok/s over all, "
                         "greedy)", "speculating", "off")
    for side in list(sides)[1:]:
        table.append(Row(side, f"{rate[side]:.1f}", f"{rate['off']:.1f}", ratio(rate[side], rate["off"]),
                         f"accepted {drafted[side][1]}/{drafted[side][0]}; same text on every side: "
                         f"{'yes' if same else 'NO'}"))
