"""GGUF files served from their own bits vs llama.cpp on the same files.

For each file (the embedded SmolLM2 Q4_1, and Q4_K_M and Q8_0 that llama-quantize
makes from its float32 form), our engine in process loads the file itself (its
blocks stay quantized) and llama-bench runs on the same file: single-stream decode
and prefill. On the embedded file, 8 and 32 streams are also measured against the
same weights held as float32 (``--dequantize``, what the server held before).
Needs the llama.cpp build (``python -m bench.llamacpp build``); skipped otherwise.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from .common import Sample, long_prompt_ids, stream_prompt

KINDS = ("Q4_1", "Q4_K_M", "Q8_0")
SHORT = "Write a long story about a dragon who learns to paint."


async def measure(plan, results: dict, log) -> None:
    from . import llamacpp

    if not llamacpp.built():
        log("llama.cpp not built (python -m bench.llamacpp build): no GGUF rows")
        return
    out: dict = {}
    for kind in KINDS:
        path = llamacpp.gguf(kind)
        log(f"GGUF {kind} ({path.name}): ours decode {plan.decode_tokens} tokens, prefill "
            f"{plan.prefill_tokens} x {plan.reps}; then llama-bench")
        out[kind] = await _ours(plan, path, streams=kind == "Q4_1")
        out[kind].update(_file_facts(path))
        if results.get("bandwidth"):
            out[kind]["decode_limit"] = results["bandwidth"] / out[kind]["resident_bytes"]
        theirs = llamacpp.bench(kind, plan.prefill_tokens, plan.decode_tokens, reps=plan.reps)
        out[kind]["llama_decode"], out[kind]["llama_prefill"] = theirs["decode"], theirs["prefill"]
        log(f"  ours decode {out[kind]['ours_decode'].fmt()} prefill {out[kind]['ours_prefill'].fmt(0)}; "
            f"llama.cpp decode {theirs['decode']:.1f} prefill {theirs['prefill']:.0f} tok/s")
    if "Q4_1" in out:
        path = llamacpp.gguf("Q4_1")
        log("GGUF Q4_1 held as float32 (--dequantize): 8 and 32 streams")
        floats = await _ours(plan, path, streams=True, single=False, dequantize=True)
        out["Q4_1"].update({f"f32_{k}": v for k, v in floats.items()})
    results["gguf"] = out


async def _ours(plan, path: Path, *, streams: bool, single: bool = True, dequantize: bool = False) -> dict:
    from .inproc import InProcessEngine, weight_bytes

    ours = InProcessEngine(path, speculation=plan.speculation, dequantize=dequantize)
    await ours.start()
    s: dict = {}
    try:
        loaded = ours.engine.loaded
        s["resident_bytes"], s["dtype"] = weight_bytes(loaded.model), loaded.dtype
        prompt = ours.tokenizer.encode(SHORT)
        await ours.generate(tokens=8, ids=prompt)
        if single:
            s["ours_decode"], s["ours_prefill"] = Sample(), Sample()
            for rep in range(plan.reps):
                s["ours_decode"].add((await ours.generate(tokens=plan.decode_tokens, ids=prompt)).decode_tps)
                long = long_prompt_ids(ours.tokenizer, plan.prefill_tokens, salt=f"GGUF {rep}. ")
                s["ours_prefill"].add(len(long) / (await ours.generate(tokens=1, ids=long)).ttft)
        if streams:
            for n in (8, 32):
                tokens = plan.level_tokens.get(n, 32)
                agg = s[f"streams_{n}"] = Sample()
                for rep in range(plan.level_reps):
                    start = time.perf_counter()
                    rs = await asyncio.gather(*(ours.generate(tokens=tokens, text=stream_prompt(i + 1000 * rep))
                                                for i in range(n)))
                    agg.add(sum(r.tokens for r in rs) / (max(r.done for r in rs) - start))
    finally:
        await ours.close()
    return s


def _file_facts(path: Path) -> dict:
    import gguf

    reader = gguf.GGUFReader(str(path))
    types: dict[str, int] = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    return {"file_tensor_bytes": sum(int(t.n_bytes) for t in reader.tensors),
            "tensor_types": ", ".join(f"{k} x{v}" for k, v in sorted(types.items()))}

