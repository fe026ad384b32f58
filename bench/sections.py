"""Sections beyond ours vs mlx-lm at short lengths: a long context, the CPU kernels
on and off, 8-bit weights, and llama.cpp on the same weights. Sides alternate
within each repetition, as in run.py."""

from __future__ import annotations

from pathlib import Path

from .common import Sample, embedding_texts, long_prompt_ids, rotated

SHORT = "Write a long story about a dragon who learns to paint."


def _samples(*names: str) -> dict[str, Sample]:
    return {n: Sample() for n in names}


async def long_context(plan, m, ours, results: dict, log) -> None:
    """Prefill of a ``plan.long_tokens`` prompt and decode right after it: ours via
    gRPC (prefix cache bypassed) vs one mlx_lm.stream_generate."""
    from .inproc import mlx_lm_generate

    log(f"long context: {plan.long_tokens}-token prompt, then {plan.long_decode_tokens} tokens x {plan.long_reps}")
    s = _samples("mlx_lm_prefill", "mlx_lm_decode", "grpc_prefill", "grpc_decode")
    for rep in range(plan.long_reps):
        prompt = long_prompt_ids(m.tokenizer, plan.long_tokens, salt=f"Long version {rep}. ")
        for side in rotated(["mlx_lm", "grpc"], rep):
            if side == "mlx_lm":
                prefill, decode = mlx_lm_generate(m, prompt, plan.long_decode_tokens)
            else:
                r = await ours.generate(tokens=plan.long_decode_tokens, ids=prompt, bypass=True)
                prefill, decode = len(prompt) / r.ttft, r.decode_tps
            s[f"{side}_prefill"].add(prefill)
            s[f"{side}_decode"].add(decode)
    results["long"] = s
    log("  " + ", ".join(f"{k} {v.fmt(0)}" for k, v in s.items()) + " tok/s")


async def kernels_on_off(plan, model_dir: Path, embed_dir: Path | None, local, results: dict, log) -> None:
    """Our engine in this process with the CPU kernels and with MLX's own ops; the
    encoder likewise."""
    from .inproc import DirectEmbedder, InProcessEngine

    stock = InProcessEngine(model_dir, kernels=False, speculation=plan.speculation)
    await stock.start()
    try:
        tok = stock.tokenizer
        sides = {"kernels": local, "stock": stock}
        s = _samples(*(f"{side}_{what}" for side in sides for what in ("decode", "prefill")))
        log(f"kernels on/off: decode {plan.decode_tokens} tokens, prefill {plan.prefill_tokens} x {plan.reps}")
        await stock.generate(tokens=8, text=SHORT)
        for rep in range(plan.reps):
            prompt = long_prompt_ids(tok, plan.prefill_tokens, salt=f"On-off {rep}. ")
            for side in rotated(list(sides), rep):
                engine = sides[side]
                s[f"{side}_decode"].add((await engine.generate(tokens=plan.decode_tokens, ids=tok.encode(SHORT))).decode_tps)
                s[f"{side}_prefill"].add(len(prompt) / (await engine.generate(tokens=1, ids=prompt)).ttft)
    finally:
        await stock.close()
    if embed_dir is not None:
        embedders = {"kernels": DirectEmbedder(embed_dir), "stock": DirectEmbedder(embed_dir, kernels=False)}
        for embedder in embedders.values():  # first calls allocate; not what is measured
            embedder.rate(embedding_texts(16, "warm-up"))
        for rep in range(plan.embed_reps):
            for side in rotated(list(embedders), rep):
                s.setdefault(f"{side}_embed", Sample()).add(
                    embedders[side].rate(embedding_texts(plan.embed_texts, f"onoff{rep}")))
    results["kernels"] = s
    log("  " + ", ".join(f"{k} {v.fmt(0)}" for k, v in s.items()))


def quantized_copy(model_dir: Path, bits: int, group: int, log) -> Path:
    """An MLX affine-quantized copy of the float32 model (made once, beside it)."""
    import mlx_lm

    target = model_dir.with_name(f"{model_dir.name}-q{bits}g{group}")
    if not (target / "config.json").is_file():
        log(f"writing a {bits}-bit copy of {model_dir.name} to {target}")
        mlx_lm.convert(str(model_dir), mlx_path=str(target), quantize=True, q_bits=bits, q_group_size=group)
    return target


async def quantized(plan, model_dir: Path, results: dict, log) -> None:
    """8-bit weights: our engine (kernels read the quantized bytes) vs mlx-lm on the
    same weights (MLX's CPU quantized matmul) for decode; our prefill alone (MLX's
    scalar quantized matmul would take minutes for a 1,000-token prompt; llama.cpp's
    Q8_0 prefill is the comparison)."""
    from engine.loading.model import load_generation_model

    from .inproc import InProcessEngine, mlx_lm_generate

    q8 = quantized_copy(model_dir, 8, 64, log)
    ours = InProcessEngine(q8, speculation=plan.speculation)
    await ours.start()
    try:
        m8 = load_generation_model(q8, use_kernels=False)
        prompt = m8.tokenizer.encode(SHORT)
        s = _samples("ours_decode", "ours_prefill", "mlx_lm_decode")
        log(f"8-bit weights: decode {plan.decode_tokens} tokens, prefill {plan.prefill_tokens} x {plan.reps}")
        await ours.generate(tokens=8, ids=prompt)
        for rep in range(plan.reps):
            long = long_prompt_ids(m8.tokenizer, plan.prefill_tokens, salt=f"Eight bits {rep}. ")
            for side in rotated(["ours", "mlx_lm"], rep):
                if side == "ours":
                    s["ours_decode"].add((await ours.generate(tokens=plan.decode_tokens, ids=prompt)).decode_tps)
                    s["ours_prefill"].add(len(long) / (await ours.generate(tokens=1, ids=long)).ttft)
                else:
                    s["mlx_lm_decode"].add(mlx_lm_generate(m8, prompt, plan.decode_tokens)[1])
    finally:
        await ours.close()
    results["q8"] = s
    log("  " + ", ".join(f"{k} {v.fmt(0)}" for k, v in s.items()) + " tok/s")


def llama_cpp(plan, results: dict, log) -> None:
    """llama-bench on F32 and Q8_0 GGUFs of the same weights, when built by hand
    (``python -m bench.llamacpp build``); skipped otherwise."""
    from . import llamacpp

    if not llamacpp.built():
        log("llama.cpp not built (python -m bench.llamacpp build): no llama.cpp rows")
        return
    out = {}
    for kind in ("F32", "Q8_0"):
        log(f"llama-bench {kind}: -p {plan.prefill_tokens} -n {plan.decode_tokens} x {plan.reps}")
        out[kind] = llamacpp.bench(kind, plan.prefill_tokens, plan.decode_tokens, reps=plan.reps)
        log(f"  {out[kind]}")
    results["llamacpp"] = out
