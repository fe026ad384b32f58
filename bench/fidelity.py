"""Teacher-forced fidelity against llama.cpp on the same GGUF file: perplexity and top-1 agreement.

    .venv/bin/python -m bench.fidelity [--files embedded,Q4_0] [--ctx 512] [--chunks 8]

The text is this project's own prose (README and docs, code blocks and tables left out),
tokenized by the file's tokenizer into ``--chunks`` chunks of ``--ctx`` tokens, each
starting with the file's BOS token. Each numerics mode (``exact``, ``llama``) runs the
model over every chunk in process and scores the second half of it, as llama.cpp's
perplexity does; its log-probabilities are written in llama-perplexity's own file format
(``--kl-divergence-base``, 16-bit log-probabilities per position). ``llama-perplexity
--kl-divergence`` then runs llama.cpp's forward over the same tokens and compares: its
perplexity (PPL(Q)) against ours (PPL(base)), the KL divergence, and the share of
positions whose most likely token is the same on both sides (teacher-forced top-1
agreement). Needs ``python -m bench.llamacpp build`` (with llama-perplexity); never in CI.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODES = ("exact", "llama")
ROOT = Path(__file__).resolve().parent.parent
PROSE = ("README.md", "docs/ARCHITECTURE.md", "docs/OPERATIONS.md", "docs/PERFORMANCE.md")
REPORTED = {  # llama-perplexity's summary lines -> our names
    "ppl_llama": r"Mean PPL\(Q\)\s*:\s*([\d.]+)",
    "ppl_ours": r"Mean PPL\(base\)\s*:\s*([\d.]+)",
    "ratio": r"Mean PPL\(Q\)/PPL\(base\)\s*:\s*([\d.]+)",
    "kld": r"Mean\s+KLD:\s*([\d.]+)",
    "same_top": r"Same top p:\s*([\d.]+)",
}


def log(msg: str) -> None:
    print(f"[fidelity {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def prose() -> str:
    """The docs' paragraphs: no fenced code, tables, headings or indented blocks."""
    out: list[str] = []
    for name in PROSE:
        path = ROOT / name
        if not path.is_file():
            continue
        fenced = False
        for line in path.read_text().splitlines():
            if line.startswith("```"):
                fenced = not fenced
                continue
            if fenced or line.startswith(("|", "#", "    ")) or not line.strip():
                if out and out[-1]:
                    out.append("")  # a paragraph ends
                continue
            out.append(line.strip())
    return re.sub(r"\n{2,}", "\n\n", "\n".join(out))


def chunks(file: Path, n_ctx: int, n_chunk: int) -> np.ndarray:
    """[n_chunk, n_ctx] token ids: each chunk the file's BOS then the text's next tokens."""
    from transformers import AutoTokenizer

    from engine.loading.gguf_file import read_gguf
    from engine.loading.model import resolve_artifact

    meta = read_gguf(file).metadata
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if bos is None:
        raise SystemExit(f"{file.name} names no BOS token")
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_artifact(file)))
    ids = tokenizer.encode(prose(), add_special_tokens=False)
    body = n_ctx - 1
    if len(ids) < n_chunk * body:
        raise SystemExit(f"the text gives {len(ids)} tokens, fewer than {n_chunk} chunks of {body}")
    rows = [[int(bos), *ids[i * body:(i + 1) * body]] for i in range(n_chunk)]
    return np.array(rows, dtype=np.int32)


def quantized_log_probs(logits: np.ndarray) -> np.ndarray:
    """llama-perplexity's stored form of each row's log-softmax: two float32 (scale, lowest
    log-probability kept) then one uint16 per vocabulary entry, the row padded to even."""
    rows, vocab = logits.shape
    nv = 2 * ((vocab + 1) // 2) + 4
    hi = logits.max(axis=1)
    lo = np.maximum(logits.min(axis=1), hi - 16).astype(np.float32)
    lse = np.log(np.exp(logits - hi[:, None]).astype(np.float64).sum(axis=1)).astype(np.float32)
    scale = ((hi - lo) / np.float32(65535)).astype(np.float32)
    inv = np.where(scale > 0, np.float32(1) / np.where(scale > 0, scale, 1), 0).astype(np.float32)
    codes = np.where(logits > lo[:, None], np.rint(inv[:, None] * (logits - lo[:, None])), 0)
    out = np.zeros((rows, nv), dtype=np.uint16)
    header = np.stack([scale, (lo - hi - lse).astype(np.float32)], axis=1).astype(np.float32)
    out[:, :4] = header.view(np.uint16)
    out[:, 4:4 + vocab] = codes.astype(np.uint16)
    return out


@dataclass
class Ours:
    path: Path  # the --kl-divergence-base file
    nll: float  # mean negative log-likelihood over the scored positions (float64, unquantized)
    positions: int


def ours(file: Path, mode: str, tokens: np.ndarray, out: Path) -> Ours:
    """Our logits over every chunk, scored and written as llama-perplexity's base file."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from engine.loading.model import load_generation_model

    loaded = load_generation_model(file, numerics=mode)
    n_chunk, n_ctx = tokens.shape
    first = n_ctx // 2
    nll, count, vocab = 0.0, 0, None
    with out.open("wb") as f:
        f.write(b"_logits_")
        for i, row in enumerate(tokens):
            logits = loaded.model(mx.array(row)[None], cache=make_prompt_cache(loaded.model))[0, first:n_ctx - 1]
            scores = np.array(logits.astype(mx.float32), dtype=np.float32)
            if vocab is None:
                vocab = scores.shape[1]
                f.write(np.array([n_ctx, vocab, n_chunk], dtype=np.int32).tobytes())
                f.write(tokens.astype(np.int32).tobytes())
            nexts = row[first + 1:]
            as64 = scores.astype(np.float64)
            hi = as64.max(axis=1)
            nll += float((hi + np.log(np.exp(as64 - hi[:, None]).sum(axis=1)) - as64[np.arange(len(nexts)), nexts]).sum())
            count += len(nexts)
            f.write(quantized_log_probs(scores).tobytes())
            log(f"{file.name} {mode}: chunk {i + 1} of {n_chunk}")
    return Ours(out, nll / count, count)


def theirs(file: Path, base: Path, n_ctx: int, threads: int, extra: list[str]) -> dict[str, float]:
    """llama-perplexity's comparison of its own forward with ``base``."""
    from . import llamacpp

    argv = [str(llamacpp.tool(llamacpp.PERPLEXITY)), "-m", str(file), "--kl-divergence-base", str(base),
            "--kl-divergence", "-c", str(n_ctx), "-b", str(n_ctx), "-t", str(threads), *extra]
    run = subprocess.run(argv, capture_output=True, text=True)
    text = run.stdout + run.stderr
    found = {k: re.search(p, text) for k, p in REPORTED.items()}
    if run.returncode != 0 or not all(found.values()):
        raise SystemExit(f"llama-perplexity failed ({run.returncode}):\n{text[-3000:]}")
    return {k: float(m.group(1)) for k, m in found.items() if m is not None}


def gguf_file(name: str) -> Path:
    """``embedded``: the embedded SmolLM2 file; ``embedded-TYPE``: it as TYPE (llama-quantize);
    a type alone: the 1B-shaped file of bench/real_models.py."""
    from . import llamacpp, real_models

    if name == "embedded" or name.startswith("embedded-"):
        return llamacpp.gguf(name.removeprefix("embedded").removeprefix("-") or llamacpp.EMBEDDED_KIND)
    return real_models.make("1b", name, 0, log)


def main(argv: list[str] | None = None) -> int:
    import os

    from . import llamacpp
    from .common import cpu_model

    p = argparse.ArgumentParser(prog="python -m bench.fidelity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", default="embedded,Q4_0",
                   help="embedded (its Q4_1 file), embedded-TYPE (it as F32, Q8_0, ...), or a 1B-shaped GGUF type "
                        "(random weights)")
    p.add_argument("--ctx", type=int, default=512, help="tokens per chunk (the second half of each is scored)")
    p.add_argument("--chunks", type=int, default=8, help="chunks of text (8 x 255 = 2,040 scored positions)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--llama-arg", action="append", default=[], metavar="ARG",
                   help="an argument for llama-perplexity (repeatable), e.g. --llama-arg=-ctk --llama-arg=f32")
    args = p.parse_args(argv)
    if not llamacpp.perplexity_built():
        print("needs llama-perplexity: python -m bench.llamacpp build")
        return 0
    print(f"CPU: {cpu_model()}; {args.chunks} chunks of {args.ctx} tokens of this project's prose, the second "
          f"half of each scored; llama-perplexity {' '.join(args.llama_arg) or '(defaults)'}\n")
    print("| file | numerics | positions | our PPL | llama.cpp PPL | ratio | KLD | same top token |")
    print("|---|---|---|---|---|---|---|---|")
    for name in [f for f in args.files.split(",") if f]:
        file = gguf_file(name)
        tokens = chunks(file, args.ctx, args.chunks)
        for mode in MODES:
            with tempfile.TemporaryDirectory(prefix="fidelity-") as tmp:
                base = ours(file, mode, tokens, Path(tmp) / "ours.kld")
                got = theirs(file, base.path, args.ctx, args.threads, args.llama_arg)
            print(f"| {name} | {mode} | {base.positions} | {np.exp(base.nll):.4f} | {got['ppl_llama']:.4f} | "
                  f"{got['ratio']:.4f} | {got['kld']:.5f} | {got['same_top']:.2f}% |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
