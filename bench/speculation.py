"""Speculative decoding side by side in one run: off, n-gram prompt lookup, a draft
model, and mlx-lm's own ``speculative_generate_step`` with the same draft.

    .venv/bin/python -m bench.speculation --markdown        # SmolLM2-135M f32, ~10 min
    .venv/bin/python -m bench.speculation --quick           # fewer prompts and tokens
    .venv/bin/python -m bench.speculation --only grammar    # one workload (prediction, grammar, heads)

Workloads: copy-heavy (quote, extract or edit a passage given in the prompt) and free
(open-ended chat), greedy; predicted outputs (``bench/spec_prediction.py``), grammar
proposals (``bench/spec_grammar.py``) and an EAGLE-3 draft head trained here
(``bench/spec_heads.py``; the first run trains it, about 35 minutes more). The draft model is the target itself unless
``--draft`` names another with the same tokenizer: with itself every draft is accepted,
so it measures the machinery's cost, not a realistic draft. Every mode must produce
the same tokens as speculation off; the tables say so.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import argparse
import asyncio
import sys
import time
from pathlib import Path

import engine  # noqa: F401  - BLAS before mlx
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import GenerationRequest, SpeculationMode, SpeculationOptions, StopOptions, TokenPrompt

from .common import Sample, default_model, machine_facts, prepare_f32, ratio
from .report import Report, Row
from .run import log
from .spec_grammar import grammar_rows
from .spec_heads import head_rows
from .spec_prediction import prediction_rows
from .spec_prompts import COPY_TASKS, FREE_TASKS, copy_batch, free_batch
from .spec_timed import timed

MODES = (SpeculationMode.OFF, SpeculationMode.NGRAM, SpeculationMode.DRAFT)


async def ours(engine: GenerationEngine, ids: list[int], tokens: int, mode: SpeculationMode, k: int):
    """(tokens, decode tok/s, drafts, accepted) for one greedy request."""
    r = await timed(engine, GenerationRequest(TokenPrompt(tuple(ids)), stopping=StopOptions(max_tokens=tokens),
                                              speculation=SpeculationOptions(mode, k), bypass_prefix_cache=True))
    return r.tokens, r.rate, r.usage.draft_tokens, r.usage.accepted_draft_tokens


def mlx_lm(model, draft, tokenizer, ids: list[int], tokens: int, k: int | None):
    """The same with mlx-lm's stream_generate (speculative when ``k``)."""
    from mlx_lm.generate import stream_generate

    kw = {"draft_model": draft, "num_draft_tokens": k} if k else {}
    out, times, drafted = [], [], 0
    for r in stream_generate(model, tokenizer, ids, max_tokens=tokens, **kw):
        times.append(time.perf_counter())
        out.append(r.token)
        drafted += bool(getattr(r, "from_draft", False))
        if r.finish_reason:
            break
    eos = set(tokenizer.eos_token_ids or ())
    out = [t for t in out if t not in eos]
    rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
    return out, rate, drafted


async def run(args) -> Report:
    model_dir = prepare_f32(args.model or default_model(), log)
    draft_dir = prepare_f32(args.draft, log) if args.draft else model_dir
    config = GenerationConfig(dtype="float32", draft_model=str(draft_dir),
                              scheduler=SchedulerConfig(max_active=8, step_tokens=args.step_tokens,
                                                        speculation_rows=args.speculation_rows))
    eng = GenerationEngine(str(model_dir), name="bench", config=config)
    await eng.start()
    tok = eng.loaded.tokenizer
    target, draft = eng.loaded.model, eng._draft.model
    report = Report()
    report.facts.update(machine_facts())
    report.facts.update({"model": str(model_dir), "draft": str(draft_dir), "drafts per step": str(args.k),
                         "step tokens": str(args.step_tokens), "speculation rows": str(args.speculation_rows)})
    table = report.table("speculative decoding, 1 stream (decode tok/s, greedy)", "speculating", "off")
    tasks = [("copy", t) for t in COPY_TASKS[: args.prompts]] + [("free", t) for t in FREE_TASKS[: args.prompts]]
    if args.only:
        tasks, args.streams = [], 0
        args.prediction_tokens = args.prediction_tokens if args.only == "prediction" else 0
        args.extractions = args.extractions if args.only == "grammar" else 0
        args.heads = args.heads and args.only == "heads"
    ratios: dict[str, dict[str, list[float]]] = {}
    try:
        for kind, (name, messages) in tasks:
            ids = tok.apply_chat_template(messages, add_generation_prompt=True)
            await ours(eng, ids, 8, SpeculationMode.OFF, 0)  # warm-up
            res = {m: await ours(eng, ids, args.tokens, m, args.k) for m in MODES}
            base_tokens, base_rate = res[SpeculationMode.OFF][:2]
            lm_plain = mlx_lm(target, None, tok, ids, args.tokens, None)
            lm_spec = mlx_lm(target, draft, tok, ids, args.tokens, args.k)
            log(f"{kind}/{name}: off {base_rate:.1f}, " + ", ".join(
                f"{m.value} {res[m][1]:.1f}" for m in MODES[1:]) + f", mlx-lm {lm_plain[1]:.1f} / spec {lm_spec[1]:.1f}")
            for m in MODES[1:]:
                out, rate, drafted, accepted = res[m]
                ratios.setdefault(kind, {}).setdefault(m.value, []).append(rate / base_rate)
                table.append(Row(f"{kind}: {name}, {m.value}", f"{rate:.1f}", f"{base_rate:.1f}", ratio(rate, base_rate),
                                 f"accepted {accepted}/{drafted}; {len(out)} tokens; "
                                 f"same tokens: {'yes' if out == base_tokens else 'NO'}"))
            table.append(Row(f"{kind}: {name}, mlx-lm draft", f"{lm_spec[1]:.1f}", f"{lm_plain[1]:.1f}",
                             ratio(lm_spec[1], lm_plain[1]), f"mlx-lm speculative_generate_step vs its own "
                             f"stream_generate; {lm_spec[2]} from the draft"))
        if args.streams:
            await batch_rows(eng, tok, args, report)
        if args.prediction_tokens:
            await prediction_rows(eng, tok, args.prediction_tokens, report)
        if args.extractions:
            await grammar_rows(eng, tok, report, args.extractions)
        if args.heads:
            await head_rows(model_dir, report, tokens=args.tokens, k=args.head_k, prompts=args.prompts,
                            head=Path(args.head) if args.head else None, train_minutes=args.train_minutes,
                            train_prompts=args.train_prompts)
    finally:
        await eng.close()
    summary = report.table("summary (median ratio vs off, 1 stream)", "ratio", "")
    for kind, modes in ratios.items():
        for mode, values in modes.items():
            summary.append(Row(f"{kind}, {mode}", f"{sorted(values)[len(values) // 2]:.2f}x"))
    return report


async def batch_rows(eng: GenerationEngine, tok, args, report: Report) -> None:
    """``args.streams`` prompts at once, copy-heavy then free: aggregate tok/s, off vs n-gram."""
    table = report.table(f"{args.streams} streams at once (aggregate tok/s)", "n-gram", "off")
    for kind, chats in (("copy-heavy", copy_batch(args.streams)), ("free", free_batch(args.streams))):
        prompts = [tok.apply_chat_template(m, add_generation_prompt=True) for m in chats]
        rates: dict = {}
        accepted = drafted = 0
        for mode in (SpeculationMode.OFF, SpeculationMode.NGRAM) * 2:
            start = time.perf_counter()
            outs = await asyncio.gather(*(ours(eng, p, args.tokens, mode, args.k) for p in prompts))
            rates.setdefault(mode, Sample()).add(sum(len(o[0]) for o in outs) / (time.perf_counter() - start))
            if mode is SpeculationMode.NGRAM:
                accepted, drafted = accepted + sum(o[3] for o in outs), drafted + sum(o[2] for o in outs)
        on, off = rates[SpeculationMode.NGRAM], rates[SpeculationMode.OFF]
        table.append(Row(kind, on.fmt(), off.fmt(), ratio(on.median, off.median), f"accepted {accepted}/{drafted}"))
        log(f"{args.streams} {kind} streams: off {off.fmt()}, ngram {on.fmt()} tok/s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.speculation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="target model (default: embedded SmolLM2-135M, as float32)")
    p.add_argument("--draft", help="draft model with the same tokenizer (default: the target itself)")
    p.add_argument("--k", type=int, default=6, help="drafts per step asked for")
    p.add_argument("--step-tokens", type=int, default=16, help="the scheduler's step_tokens")
    p.add_argument("--speculation-rows", type=int, default=1,
                   help="the scheduler's speculation_rows (rows speculate only in steps of at most this many)")
    p.add_argument("--tokens", type=int, default=160, help="tokens generated per request")
    p.add_argument("--prompts", type=int, default=3, help="prompts per workload")
    p.add_argument("--streams", type=int, default=8, help="concurrent copy-heavy streams (0: skip)")
    p.add_argument("--prediction-tokens", type=int, default=400,
                   help="tokens per request of the predicted-outputs workload (0: skip)")
    p.add_argument("--extractions", type=int, default=20,
                   help="JSON Schema extractions of the grammar-proposals workload (0: skip)")
    p.add_argument("--head", help="an EAGLE-3 head directory for the target (default: the one "
                                  "bench.draft_head_train writes, trained first when missing)")
    p.add_argument("--head-k", type=int, default=4, help="drafts per step asked of the head")
    p.add_argument("--train-minutes", type=float, default=10.0, help="training time when a head is trained")
    p.add_argument("--train-prompts", type=int, default=240, help="chat prompts answered to train a head")
    p.add_argument("--no-heads", dest="heads", action="store_false", help="skip the draft-head rows")
    p.add_argument("--only", choices=("prediction", "grammar", "heads"),
                   help="one workload alone: predicted outputs, grammar proposals or draft heads")
    p.add_argument("--quick", action="store_true", help="one prompt per workload, 48 tokens, 4 streams")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.prompts, args.tokens, args.streams, args.prediction_tokens, args.extractions = 1, 48, 4, 64, 2
        args.train_minutes, args.train_prompts = 1.0, 24
    started = time.perf_counter()
    report = asyncio.run(run(args))
    command = "python -m bench.speculation " + " ".join(sys.argv[1:] if argv is None else argv)
    report.publish(command, started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
