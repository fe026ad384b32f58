"""Greedy answers against llama.cpp's own server on the same GGUF file, per numerics mode.

    .venv/bin/python -m bench.agreement [--files embedded,Q4_0] [--tokens 64]

For each file (``embedded``: the embedded SmolLM2 Q4_1 file; a type such as ``Q4_0``: the
1B-shaped file of bench/real_models.py): 16 chat prompts, their templated ids sent to
``llama-server`` (greedy, EOS ignored) and to our server once per ``--numerics`` mode
(``exact``, ``llama``). Reported per mode: answers identical to llama-server's, the mean
first position where an answer departs from it, and answers identical to the other
mode's. Needs ``python -m bench.llamacpp build`` (with llama-server); never in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

MODES = ("exact", "llama")
QUESTIONS = (
    "What is the capital of France?", "Name three primary colours.", "How many legs does a spider have?",
    "What is 12 times 12?", "Who wrote Romeo and Juliet?", "What is the boiling point of water in Celsius?",
    "Give me a synonym for happy.", "What is the largest planet in our solar system?",
    "Translate 'good morning' into Spanish.", "What gas do plants absorb from the air?",
    "Write a haiku about the sea.", "What is the square root of 81?", "Name a mammal that can fly.",
    "What language is spoken in Brazil?", "Explain what a noun is in one sentence.",
    "List the days of the week.",
)


def log(msg: str) -> None:
    print(f"[agreement {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def gguf_file(name: str) -> Path:
    from engine.loading.embedded import default_generation_model

    from . import real_models

    return default_generation_model() if name == "embedded" else real_models.make("1b", name, 0, log)


def prompt_ids(file: Path) -> list[list[int]]:
    """The questions as chat prompts, templated by the file's own tokenizer."""
    from transformers import AutoTokenizer

    from engine.loading.model import resolve_artifact

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_artifact(file)))
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
             for q in QUESTIONS]
    return [tokenizer.encode(text, add_special_tokens=False) for text in texts]


async def ours(file: Path, mode: str, prompts: list[list[int]], tokens: int, log_dir: Path) -> list[list[int]]:
    from .servers import OurServer

    server = OurServer(file, None, log_dir, max_active=1, extra=["--numerics", mode])
    try:
        await server.start(timeout=3600)
        # one at a time: each alone, as llama-server's one slot runs them
        return [await server.greedy(ids, tokens) for ids in prompts]
    finally:
        await server.close()


async def theirs(file: Path, prompts: list[list[int]], tokens: int, log_dir: Path,
                 extra: list[str]) -> list[list[int]]:
    from .llama_server import LlamaServer

    server = LlamaServer(file, log_dir, slots=1, context_per_slot=max(len(p) for p in prompts) + tokens + 64,
                         extra=extra)
    try:
        await server.start()
        return [await server.complete(tokens=tokens, ids=ids) for ids in prompts]
    finally:
        await server.close()


def departs(a: list[int], b: list[int]) -> int:
    """The first position where ``a`` and ``b`` differ (their length if nowhere)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main(argv: list[str] | None = None) -> int:
    from . import llamacpp
    from .common import cpu_model

    p = argparse.ArgumentParser(prog="python -m bench.agreement", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", default="embedded,Q4_0", help="embedded, or 1B-shaped GGUF types")
    p.add_argument("--tokens", type=int, default=64, help="greedy tokens per answer")
    p.add_argument("--llama-server-arg", action="append", default=[], metavar="ARG",
                   help="an argument for llama-server (repeatable), e.g. --llama-server-arg=-ctk --llama-server-arg=f32")
    args = p.parse_args(argv)
    if not llamacpp.server_built():
        print("needs llama-server: python -m bench.llamacpp build")
        return 0
    print(f"CPU: {cpu_model()}; {len(QUESTIONS)} chat prompts, {args.tokens} greedy tokens, EOS ignored; "
          f"llama-server {' '.join(args.llama_server_arg) or '(defaults)'}\n")
    print("| file | numerics | identical to llama-server | mean first departure | identical to the other mode |")
    print("|---|---|---|---|---|")
    for name in [f for f in args.files.split(",") if f]:
        file = gguf_file(name)
        prompts = prompt_ids(file)
        with tempfile.TemporaryDirectory(prefix="agreement-") as tmp:
            anchor = asyncio.run(theirs(file, prompts, args.tokens, Path(tmp), args.llama_server_arg))
            answers = {mode: asyncio.run(ours(file, mode, prompts, args.tokens, Path(tmp))) for mode in MODES}
        for mode in MODES:
            same = sum(a == b for a, b in zip(answers[mode], anchor))
            first = sum(departs(a, b) for a, b in zip(answers[mode], anchor)) / len(anchor)
            other = answers[MODES[1 - MODES.index(mode)]]
            alike = sum(a == b for a, b in zip(answers[mode], other))
            print(f"| {name} | {mode} | {same} of {len(anchor)} | {first:.1f} | {alike} of {len(anchor)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
