"""bench.fidelity writes our log-probabilities in llama-perplexity's base-file format:
the 16-bit codes decode to each row's log-softmax within half a step, and a file made from
the embedded model over two short chunks has llama.cpp's layout and scores the second half
of each chunk (the mean negative log-likelihood read back from it equals ours)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.loading.embedded import EmbeddedModelMissing, default_generation_model


def decoded(rows: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(log-probabilities as llama-perplexity reads them, the step of each row)."""
    header = rows[:, :4].copy().view(np.float32)
    scale, floor = header[:, 0], header[:, 1]
    return scale[:, None] * rows[:, 4:4 + vocab].astype(np.float32) + floor[:, None], scale


@pytest.mark.parametrize("vocab", [7, 1000, 4097])
def test_codes_decode_to_the_log_softmax_within_half_a_step(vocab):
    from bench.fidelity import quantized_log_probs

    rng = np.random.default_rng(vocab)
    logits = (rng.standard_normal((5, vocab)) * 4).astype(np.float32)
    logits[0] = 0  # a flat row: scale 0, every code 0
    rows = quantized_log_probs(logits)
    assert rows.dtype == np.uint16 and rows.shape == (5, 2 * ((vocab + 1) // 2) + 4)
    got, scale = decoded(rows, vocab)
    exact = logits - np.log(np.exp(logits.astype(np.float64)).sum(axis=1, keepdims=True))
    kept = logits > np.maximum(logits.min(axis=1), logits.max(axis=1) - 16)[:, None]
    err = np.abs(got - exact)[kept]
    assert scale[0] == 0 and np.allclose(got[0], exact[0], atol=1e-5)
    assert (err <= np.repeat(scale, kept.sum(axis=1)) * 0.5 + 1e-4).all()
    assert (got.argmax(axis=1) == exact.argmax(axis=1)).all()


def test_the_base_file_has_llama_perplexitys_layout(tmp_path, gguf_cache):
    from bench.fidelity import chunks, ours

    try:
        file = default_generation_model()
    except EmbeddedModelMissing as exc:
        pytest.skip(str(exc))
    n_ctx, n_chunk = 64, 2
    tokens = chunks(file, n_ctx, n_chunk)
    assert tokens.shape == (n_chunk, n_ctx) and len(set(tokens[:, 0])) == 1  # each chunk starts with BOS
    made = ours(file, "exact", tokens, tmp_path / "ours.kld")
    raw = made.path.read_bytes()
    assert raw[:8] == b"_logits_"
    n, vocab, chunks_ = np.frombuffer(raw[8:20], dtype=np.int32)
    assert (n, chunks_) == (n_ctx, n_chunk)
    body = 20 + 4 * n_ctx * n_chunk
    assert (np.frombuffer(raw[20:body], dtype=np.int32).reshape(n_chunk, n_ctx) == tokens).all()
    scored, nv = n_ctx - 1 - n_ctx // 2, 2 * ((vocab + 1) // 2) + 4
    rows = np.frombuffer(raw[body:], dtype=np.uint16).reshape(n_chunk * scored, nv)
    log_probs, _ = decoded(rows, vocab)
    nexts = tokens[:, n_ctx // 2 + 1:].reshape(-1)
    assert made.positions == len(nexts) == n_chunk * scored
    read_back = -log_probs[np.arange(len(nexts)), nexts].mean()
    assert read_back == pytest.approx(made.nll, abs=2e-3)
