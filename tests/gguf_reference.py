"""The oracle for quantized GGUF files: the same weights dequantized by ``gguf``'s
own numpy dequantizer (llama.cpp's reader, independent of the engine's conversion)
into a float32 Hugging Face directory that mlx-lm loads as a plain float model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import dequantize

from engine.loading.gguf import served_tensor_names, unpermute_qk
from engine.loading.gguf_file import read_gguf
from tests.gguf_writer import NORM_PLUS_ONE, PERMUTED


def float_tensors(gguf_path: Path, config: dict) -> dict[str, np.ndarray]:
    """Every tensor of the file as float32, under its Hugging Face name (q/k rows in
    Hugging Face order: llama.cpp permutes them for llama and granite only; Gemma's
    norms less the 1 its converter added)."""
    reader = gguf.GGUFReader(str(gguf_path))
    arch = reader.fields["general.architecture"].contents()
    permuted = arch in PERMUTED
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]} if permuted else {}
    names = served_tensor_names(read_gguf(gguf_path), config)
    out = {}
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":  # Llama 3's rope scaling, in the config
            continue
        shape = tuple(int(d) for d in reversed(t.shape))
        values = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        base = t.name.rsplit(".", 1)[0]
        kind = base.rsplit(".", 1)[-1]
        if kind in heads:
            values = unpermute_qk(values, heads[kind])
        if arch in NORM_PLUS_ONE and kind.endswith("norm"):
            values = values - 1
        out[names[t.name]] = np.ascontiguousarray(values)
    return out


def file_tensor_bytes(gguf_path: Path) -> int:
    return sum(int(t.n_bytes) for t in gguf.GGUFReader(str(gguf_path)).tensors)


def float_reference(gguf_path: Path, converted: Path, out: Path) -> Path:
    """A float32 directory of ``gguf_path``'s weights beside the tokenizer and config of
    its conversion ``converted`` (quantization removed)."""
    import mlx.core as mx

    if (out / "model.safetensors").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for f in converted.iterdir():
        if f.is_file() and f.suffix == ".json" and f.name != "config.json":
            shutil.copy2(f, out / f.name)
    config = json.loads((converted / "config.json").read_text())
    config.pop("quantization", None)
    config["torch_dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(config, indent=2))
    weights = {k: mx.array(v) for k, v in float_tensors(gguf_path, config).items()}
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    return out


def served_greedy(model_dir: Path, name: str, prompts: list[list[int]], tokens: int, scheduler) -> list[list[int]]:
    """Greedy tokens of ``prompts`` served by the engine all at once (kernels, continuous
    batching, ``scheduler``'s settings), checked equal when served again as prefix-cache hits."""
    import asyncio

    from engine.events import Delta
    from engine.generation.config import GenerationConfig
    from engine.generation.frontend.engine import GenerationEngine
    from engine.requests import GenerationRequest, SamplingOptions, StopOptions, TokenPrompt

    async def run() -> list[list[int]]:
        engine = GenerationEngine(str(model_dir), name=name, config=GenerationConfig(scheduler=scheduler))
        await engine.start()
        try:
            async def one(ids):
                req = GenerationRequest(prompt=TokenPrompt(tuple(ids)), sampling=SamplingOptions(),
                                        stopping=StopOptions(max_tokens=tokens, ignore_eos=True))
                return [t async for ev in engine.generate(req) if isinstance(ev, Delta) for t in ev.token_ids]

            first = await asyncio.gather(*(one(ids) for ids in prompts))
            assert await asyncio.gather(*(one(ids) for ids in prompts)) == first  # prefix cache hits
            return first
        finally:
            await engine.close()

    return asyncio.run(run())
