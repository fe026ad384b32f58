"""Predicted outputs in the speculation bench: a passage of about 400 tokens and a code
file edited on request, one stream, greedy. Against speculation off and against the
default (n-gram) without a prediction: the original text as the prediction (the output
edits it), the unspeculated output with substitutions, insertions and deletions spread
through it, the output itself, and an unrelated text (wrong everywhere). Every side
must give the unspeculated tokens."""

from __future__ import annotations

import random

from engine.generation.frontend.engine import GenerationEngine
from engine.requests import GenerationRequest, Prediction, SpeculationMode, SpeculationOptions, StopOptions, TokenPrompt

from .common import ratio
from .report import Report, Row
from .run import log
from .spec_prompts import CODE, GARDEN, HARBOUR
from .spec_timed import timed

PASSAGE = HARBOUR + " " + GARDEN
TASKS = [
    ("edit a passage", f"Replace the word \"harbour\" with \"port\" everywhere in this text and return the whole "
                       f"text, unchanged otherwise:\n\n{PASSAGE}", PASSAGE),
    ("edit code", "Rename the variable `totals` to `sums` in this Python code and return the whole code, unchanged "
                  f"otherwise:\n\n```python\n{CODE}{CODE.replace('orders', 'sales')}```",
     f"```python\n{CODE}{CODE.replace('orders', 'sales')}```"),
]


async def predicted(engine: GenerationEngine, ids: list[int], tokens: int, prediction: Prediction | None,
                    mode: SpeculationMode = SpeculationMode.DEFAULT):
    """(tokens, decode tok/s, usage) for one greedy request."""
    r = await timed(engine, GenerationRequest(TokenPrompt(tuple(ids)), stopping=StopOptions(max_tokens=tokens),
                                              prediction=prediction, speculation=SpeculationOptions(mode),
                                              bypass_prefix_cache=True))
    return r.tokens, r.rate, r.usage


def edited(tokens: list[int], every: int, vocab: int, seed: int = 5) -> list[int]:
    """``tokens`` with an edit every ``every`` tokens, cycling substitution, insertion, deletion."""
    rng, out = random.Random(seed), []
    for i, t in enumerate(tokens):
        kind = (i // every) % 3 if i % every == every // 2 else None
        if kind == 0:
            out.append(rng.randrange(vocab))
        elif kind == 1:
            out += [rng.randrange(vocab), rng.randrange(vocab), t]
        elif kind is None:
            out.append(t)
    return out


def first_mismatch(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def prediction_rows(engine: GenerationEngine, tok, tokens: int, report: Report, rounds: int = 2) -> None:
    """Each round runs speculation off, the default (n-gram) without a prediction, then every
    variant with it, so drift hits every side alike."""
    table = report.table("predicted outputs, 1 stream (decode tok/s, greedy)", "prediction", "off")
    for name, text, original in TASKS:
        ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        await predicted(engine, ids, 8, None, SpeculationMode.OFF)  # warm-up
        base, _, _ = await predicted(engine, ids, tokens, None, SpeculationMode.OFF)
        unrelated = tok.encode(TASKS[0][2] if name != TASKS[0][0] else CODE * 4, add_special_tokens=False)
        variants = {"the original as prediction": Prediction(text=original),
                    "the output, edited every 40 tokens": Prediction(token_ids=tuple(edited(
                        base, 40, engine.loaded.vocab_size))),
                    "the output itself": Prediction(token_ids=tuple(base)),
                    "an unrelated text (wrong everywhere)": Prediction(token_ids=tuple(unrelated))}
        rates: dict[str, list[float]] = {}
        usages, same = {}, True
        for _ in range(rounds):
            for label, prediction, mode in [("off", None, SpeculationMode.OFF), ("n-gram", None, SpeculationMode.DEFAULT),
                                            *((label, p, SpeculationMode.DEFAULT) for label, p in variants.items())]:
                got, rate, usages[label] = await predicted(engine, ids, tokens, prediction, mode)
                rates.setdefault(label, []).append(rate)
                same = same and got == base
        off, ngram = median(rates["off"]), median(rates["n-gram"])
        log(f"{name}: off {off:.1f}, n-gram {ngram:.1f}, " + ", ".join(
            f"{label} {median(rates[label]):.1f}" for label in variants) + " tok/s")
        table.append(Row(f"{name}: n-gram alone, no prediction", f"{ngram:.1f}", f"{off:.1f}", ratio(ngram, off),
                         f"same tokens: {'yes' if same else 'NO'}"))
        for label, prediction in variants.items():
            rate, usage = median(rates[label]), usages[label]
            guess = list(prediction.token_ids) or tok.encode(prediction.text, add_special_tokens=False)
            lost = first_mismatch(guess, base)
            table.append(Row(f"{name}: {label}", f"{rate:.1f}", f"{off:.1f}", ratio(rate, off),
                             f"vs n-gram alone {ratio(rate, ngram)}; accepted {usage.accepted_prediction_tokens}, "
                             f"rejected {usage.rejected_prediction_tokens}; first mismatch at token {lost} of "
                             f"{len(base)}, accepted after it ~{max(usage.accepted_prediction_tokens - lost, 0)}"))
