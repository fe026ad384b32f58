"""Llama-3.2-shaped GGUF files with random weights, for measuring at a realistic size.

    .venv/bin/python -m bench.real_models [--size 1b|3b] [--types Q4_K_M,Q8_0,Q4_0] [--check]

The shapes are Llama 3.2's (1B: hidden 2048, 16 layers, 32/8 heads, MLP 8192; 3B: hidden
3072, 28 layers, 24/8 heads, MLP 8192; tied embeddings, rope theta 500000 with Llama 3's
rope scaling, rms eps 1e-5, context 4096) with the embedded SmolLM2's tokenizer (vocab
49152). Invariants: the F16 file is written as llama.cpp's converter writes a Llama
(q/k rows permuted to GGUF order, 1-D tensors and rope_freqs in F32, the rest F16); its
weights are seeded normals * 0.02 (norms 1.0), so the same seed gives the same file;
llama-quantize makes the other types from it. Files are made once, under the model cache,
and never seen half-written. Random weights: the figures measure speed, not text.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

TYPES = ("Q4_K_M", "Q8_0", "Q4_0")


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    mlp: int
    context: int = 4096
    rope_theta: float = 500000.0
    eps: float = 1e-5
    rope_factor: float = 32.0  # Llama 3.2's rope_scaling (llama3 type), written as rope_freqs

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def parameters(self, vocab: int = 49152) -> int:
        h, kv = self.hidden, self.kv_heads * self.head_dim
        return vocab * h + self.layers * (2 * h * h + 2 * kv * h + 3 * self.mlp * h + 2 * h) + h


SHAPES = {"1b": Shape("Llama-3.2-1B-shape", 2048, 16, 32, 8, 8192),
          "3b": Shape("Llama-3.2-3B-shape", 3072, 28, 24, 8, 8192)}


def models_dir() -> Path:
    from . import llamacpp

    return llamacpp.root() / "models"


def path(size: str, kind: str = "F16") -> Path:
    return models_dir() / f"random-llama-3.2-{size}.{kind}.gguf"


def rope_freqs(shape: Shape) -> np.ndarray:
    """Llama 3's per-pair rope factors as llama.cpp's converter computes them (low 1, high 4,
    original context 8192)."""
    dim, low, high, old = shape.head_dim, 1.0, 4.0, 8192
    out = []
    for freq in 1.0 / shape.rope_theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim):
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(shape.rope_factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / shape.rope_factor + smooth))
    return np.array(out, dtype=np.float32)


def hf_weight(seed: int, name: str, rows: int, cols: int) -> np.ndarray:
    """The float16 [rows, cols] weight named ``name`` (GGUF name less ``.weight``) in Hugging
    Face order: seeded normals * 0.02, as an initialized model's."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)


def tensors(shape: Shape, vocab: int, seed: int) -> Iterator[tuple[str, tuple[int, ...], Callable[[], np.ndarray]]]:
    """(GGUF name, numpy shape, maker) in the converter's order; makers are lazy so one tensor
    is in memory at a time."""
    from engine.loading.gguf_arch import permute_qk  # llama.cpp's permute, HF -> GGUF rows

    def normal(name: str, rows: int, cols: int, heads: int = 0) -> Callable[[], np.ndarray]:
        def make() -> np.ndarray:
            w = hf_weight(seed, name, rows, cols)
            return permute_qk(w, heads) if heads else w
        return make

    def ones(n: int) -> Callable[[], np.ndarray]:
        return lambda: np.ones(n, dtype=np.float32)

    h, kv = shape.hidden, shape.kv_heads * shape.head_dim
    yield "rope_freqs.weight", (shape.head_dim // 2,), lambda: rope_freqs(shape)
    yield "token_embd.weight", (vocab, h), normal("token_embd", vocab, h)
    for i in range(shape.layers):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (h,), ones(h)
        yield b + "attn_q.weight", (h, h), normal(b + "attn_q", h, h, shape.heads)
        yield b + "attn_k.weight", (kv, h), normal(b + "attn_k", kv, h, shape.kv_heads)
        yield b + "attn_v.weight", (kv, h), normal(b + "attn_v", kv, h)
        yield b + "attn_output.weight", (h, h), normal(b + "attn_output", h, h)
        yield b + "ffn_norm.weight", (h,), ones(h)
        yield b + "ffn_gate.weight", (shape.mlp, h), normal(b + "ffn_gate", shape.mlp, h)
        yield b + "ffn_up.weight", (shape.mlp, h), normal(b + "ffn_up", shape.mlp, h)
        yield b + "ffn_down.weight", (h, shape.mlp), normal(b + "ffn_down", h, shape.mlp)
    yield "output_norm.weight", (h,), ones(h)


def tokenizer_fields(source: Path) -> list[tuple[str, object, list]]:
    """(key, value, GGUF value types) of every ``tokenizer.*`` key of ``source``."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    return [(k, f.contents(), f.types) for k, f in reader.fields.items() if k.startswith("tokenizer.")]


def write_f16(shape: Shape, out: Path, seed: int = 0, tokenizer_source: Path | None = None) -> Path:
    """The F16 GGUF of ``shape`` (tied embeddings) with ``tokenizer_source``'s tokenizer
    (default: the embedded SmolLM2 GGUF); written to a temporary name, then renamed."""
    import gguf

    from engine.loading.embedded import default_generation_model

    fields = tokenizer_fields(tokenizer_source or default_generation_model())
    vocab = len(next(v for k, v, _ in fields if k == "tokenizer.ggml.tokens"))
    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_type("model")
    w.add_name(f"{shape.name} (random weights, seed {seed})")
    w.add_block_count(shape.layers)
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_feed_forward_length(shape.mlp)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(shape.eps)
    w.add_key_length(shape.head_dim)
    w.add_value_length(shape.head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(shape.head_dim)
    for key, value, types in fields:
        w.add_key_value(key, value, types[0], sub_type=types[-1] if types[0] == gguf.GGUFValueType.ARRAY else None)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    plan = list(tensors(shape, vocab, seed))
    for name, dims, _ in plan:
        dtype = np.float32 if len(dims) == 1 else np.float16
        w.add_tensor_info(name, dims, np.dtype(dtype), int(np.prod(dims)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, _, make in plan:
        w.write_tensor_data(make())
    w.close()
    tmp.rename(out)
    return out


def make(size: str, kind: str = "F16", seed: int = 0, log: Callable[[str], None] = print) -> Path:
    """The ``size`` model as ``kind`` (F16, or what llama-quantize makes from it), made once."""
    from . import llamacpp

    out = path(size, kind)
    if out.is_file():
        return out
    need = SHAPES[size].parameters() * (2 if kind == "F16" else 1)
    where = next(d for d in out.parents if d.exists())
    if shutil.disk_usage(where).free < 2 * need:
        raise SystemExit(f"{out.name}: about {need / 2**30:.1f} GiB to write; too little free disk space")
    if kind == "F16":
        log(f"writing {out.name} ({SHAPES[size].name}, random weights, seed {seed})")
        return write_f16(SHAPES[size], out, seed)
    source = make(size, "F16", seed, log)
    if not llamacpp.built():
        raise SystemExit(f"{kind} needs llama-quantize: python -m bench.llamacpp build")
    log(f"llama-quantize {source.name} -> {out.name}")
    tmp = out.with_name(out.name + ".tmp")
    llamacpp.quantize(source, tmp, kind)
    tmp.rename(out)
    return out


async def check(file: Path, ids: list[int], tokens: int = 4) -> list[int]:
    """Our server loads ``file`` and generates ``tokens`` greedy tokens after ``ids`` over gRPC:
    their ids."""
    import tempfile

    from .servers import OurServer

    with tempfile.TemporaryDirectory(prefix="real-models-") as tmp:
        server = OurServer(file, None, Path(tmp), max_active=4)
        try:
            await server.start(timeout=3600)
            out = await server.greedy(ids, tokens)
            if len(out) != tokens:
                raise RuntimeError(f"{file.name}: {len(out)} tokens generated, {tokens} asked")
            return out
        finally:
            await server.close()


async def llama_server_check(file: Path, ids: list[int], tokens: int = 4) -> list[int]:
    """llama-server's greedy tokens on ``file`` after ``ids``."""
    import tempfile

    from .llama_server import LlamaServer

    with tempfile.TemporaryDirectory(prefix="real-models-") as tmp:
        server = LlamaServer(file, Path(tmp), slots=1)
        try:
            await server.start()
            return await server.complete(tokens=tokens, ids=ids)
        finally:
            await server.close()


def prompt_ids(text: str = "The capital of France is") -> list[int]:
    """``text`` in the files' tokenizer (the embedded SmolLM2's)."""
    from transformers import AutoTokenizer

    from engine.loading.embedded import default_generation_model
    from engine.loading.model import resolve_artifact

    return AutoTokenizer.from_pretrained(str(resolve_artifact(default_generation_model()))).encode(text)


def main(argv: list[str] | None = None) -> int:
    import asyncio

    from . import llamacpp

    p = argparse.ArgumentParser(prog="python -m bench.real_models", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SHAPES), default="1b")
    p.add_argument("--types", default=",".join(TYPES), help="llama-quantize types made from the F16 file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true", help="our server loads each file and generates 4 greedy tokens; "
                                                        "on the F16 file llama-server does too (the same tokens)")
    args = p.parse_args(argv)
    files = [make(args.size, kind, args.seed) for kind in ["F16", *[t for t in args.types.split(",") if t]]]
    ids = prompt_ids() if args.check else []
    for f in files:
        print(f"{f}  {f.stat().st_size / 2**30:.2f} GiB")
        if args.check:
            ours = asyncio.run(check(f, ids))
            print(f"  ours generates {ours}")
            if f == files[0] and llamacpp.server_built():  # F16: both sides compute in float
                theirs = asyncio.run(llama_server_check(f, ids))
                print(f"  llama-server generates {theirs} ({'the same' if theirs == ours else 'NOT the same'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
