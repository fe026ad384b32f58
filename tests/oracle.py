"""The correctness oracle: mlx-lm's own greedy generation on the same weights."""

from __future__ import annotations

from pathlib import Path

import mlx_lm

# Different lengths: shorter and longer than the sliding window (16) and the
# server's prefill chunk (8), including a one-token prompt.
ORACLE_PROMPTS = {
    "one": "a",
    "short": "Hello world",
    "medium": "The quick brown fox jumps over the lazy dog.",
    "long": "Once upon a time, in a small village by the sea, there lived an old fisherman "
            "who told stories about the stars, the tides and the wind every evening.",
    "digits": "1 2 3 4 5 6 7 8 9 10 11 12",
    "unicode": "café naïve 日本語 — quotes “like” this",
    "chatty": "Question: what is the colour of the sky? Answer:",
    "list": "apples, pears, plums, cherries, grapes, lemons, limes, oranges, figs, dates",
}
ORACLE_TOKENS = {name: 12 + 3 * i for i, name in enumerate(ORACLE_PROMPTS)}


def greedy_reference(model_dir: Path, prompts: dict[str, str], adapter: Path | None = None
                     ) -> dict[str, list[int]]:
    """Token ids ``mlx_lm.stream_generate`` produces greedily for each prompt (with the
    model loaded as ``mlx_lm.load(model_dir, adapter_path=adapter)``)."""
    model, tokenizer = mlx_lm.load(str(model_dir), adapter_path=str(adapter) if adapter else None)
    return {name: [r.token for r in mlx_lm.stream_generate(model, tokenizer, text,
                                                           max_tokens=ORACLE_TOKENS[name])]
            for name, text in prompts.items()}


def first_step_logprobs(model_dir: Path, prompt: str, top: int) -> list[tuple[int, float]]:
    """The ``top`` most likely first tokens after ``prompt`` and their log-softmax,
    from a direct forward pass of the same weights."""
    import mlx.core as mx

    model, tokenizer = mlx_lm.load(str(model_dir))
    ids = mx.array(tokenizer.encode(prompt))[None]
    logits = model(ids)[0, -1].astype(mx.float32)
    logprobs = logits - mx.logsumexp(logits)
    order = mx.argsort(-logprobs)[:top].tolist()
    return [(i, logprobs[i].item()) for i in order]
