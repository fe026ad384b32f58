"""Draft heads in the speculation bench: an EAGLE-3 head trained here on the target's own
outputs (``bench.draft_head_train``; trained first when its directory is missing), one
stream, greedy, against speculation off and against n-gram prompt lookup, on the
bench's copy-heavy and free prompts (none of which it was trained on). Every side must
give the unspeculated tokens."""

from __future__ import annotations

import json
from pathlib import Path

from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import GenerationRequest, SpeculationMode, SpeculationOptions, StopOptions, TokenPrompt

from .common import ratio
from .draft_head_train import head_dir, train
from .report import Report, Row
from .run import log
from .spec_prompts import COPY_TASKS, FREE_TASKS
from .spec_timed import timed

SIDES = (("off", SpeculationMode.OFF), ("n-gram", SpeculationMode.NGRAM), ("EAGLE-3 head", SpeculationMode.DRAFT))


async def head_rows(model_dir: Path, report: Report, *, tokens: int, k: int, prompts: int, rounds: int = 2,
                    head: Path | None = None, train_minutes: float = 10.0,
                    train_prompts: int = 240) -> None:
    head = head or head_dir(model_dir)
    if not (head / "model.safetensors").is_file():
        log(f"draft head: none at {head}; training one (about {train_minutes + 25:.0f} minutes)")
        train(model_dir, head, n_prompts=train_prompts, tokens=160, minutes=train_minutes, draft_vocab=8192)
    facts = json.loads((head / "training.json").read_text()) if (head / "training.json").is_file() else {}
    report.facts["draft head"] = f"{head.name}: " + ", ".join(f"{k} {v}" for k, v in facts.items())
    eng = GenerationEngine(str(model_dir), name="heads", config=GenerationConfig(
        dtype="float32", draft_model=str(head), scheduler=SchedulerConfig(max_active=8)))
    await eng.start()
    tok = eng.loaded.tokenizer
    table = report.table(f"a trained EAGLE-3 head, 1 stream (decode tok/s, greedy, {k} drafts a step)",
                         "speculating", "off")
    try:
        for kind, (name, messages) in [("copy", t) for t in COPY_TASKS[:prompts]] + \
                                      [("free", t) for t in FREE_TASKS[:prompts]]:
            ids = tok.apply_chat_template(messages, add_generation_prompt=True)
            await _one(eng, ids, 8, SpeculationMode.DRAFT, k)  # warm-up
            rates: dict[str, list[float]] = {}
            outs, usages = {}, {}
            for _ in range(rounds):  # sides alternate, so drift hits each alike
                for label, mode in SIDES:
                    r = await _one(eng, ids, tokens, mode, k)
                    rates.setdefault(label, []).append(r.rate)
                    outs[label], usages[label] = r.tokens, r.usage
            base = _median(rates["off"])
            for label, _ in SIDES[1:]:
                u = usages[label]
                steps = len(outs[label]) - u.accepted_draft_tokens
                table.append(Row(f"{kind}: {name}, {label}", f"{_median(rates[label]):.1f}", f"{base:.1f}",
                                 ratio(_median(rates[label]), base),
                                 f"accepted {u.accepted_draft_tokens}/{u.draft_tokens} "
                                 f"({u.accepted_draft_tokens / max(1, u.draft_tokens):.0%}), "
                                 f"{len(outs[label]) / max(1, steps):.2f} tokens a step; "
                                 f"same tokens: {'yes' if outs[label] == outs['off'] else 'NO'}"))
            log(f"heads {kind}/{name}: " + ", ".join(f"{s} {_median(v):.1f}" for s, v in rates.items()))
    finally:
        await eng.close()


async def _one(eng: GenerationEngine, ids: list[int], tokens: int, mode: SpeculationMode, k: int):
    return await timed(eng, GenerationRequest(TokenPrompt(tuple(ids)), stopping=StopOptions(max_tokens=tokens),
                                              speculation=SpeculationOptions(mode, k), bypass_prefix_cache=True))


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]
