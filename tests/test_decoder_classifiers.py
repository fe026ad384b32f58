"""Decoder sequence classifiers and yes/no rerankers: labels and scores equal a numpy
reference over mlx-lm's own backbone (the checkpoint's score head, softmax; the output
layer's two rows, sigmoid of their difference), batched or alone; what each kind serves
and refuses; malformed checkpoints are refused at load, by name."""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest
import pytest_asyncio

from engine.embedding.engine import EmbeddingEngine
from engine.errors import Unsupported, UnsupportedModel
from engine.requests import ClassifyRequest, EmbeddingRequest, RerankRequest
from tests.fixtures.decoder_classifiers import (LABELS, build_decoder_classifier, build_decoder_reranker,
                                                one_token_words)

TEXTS = ["The harbour was busy all winter.", "Bread rises overnight.", "x", "Tides come and go " * 8]
QUERY = "<Query>: when did the harbour open?\n<Document>: "


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, fixture_models):
    root = tmp_path_factory.mktemp("decoder-classifiers")
    return {"classifier": build_decoder_classifier(fixture_models["qwen3"], root / "classifier"),
            "reranker": build_decoder_reranker(fixture_models["qwen3"], root / "reranker")}


@pytest_asyncio.fixture(scope="module")
async def engines(dirs):
    made = {name: EmbeddingEngine(path, name=name) for name, path in dirs.items()}
    for e in made.values():
        await e.start()
    yield made
    for e in made.values():
        await e.close()


def reference_logits(model_dir, texts, rows: np.ndarray) -> np.ndarray:
    """Last-token hidden states from mlx-lm's backbone, one text at a time, times ``rows``."""
    import mlx_lm

    model, tokenizer = mlx_lm.load(str(model_dir))
    out = []
    for text in texts:
        hidden = model.model(mx.array([tokenizer.encode(text)]))[0, -1]
        out.append(np.array(hidden.astype(mx.float32), dtype=np.float64) @ rows.T)
    return np.array(out)


async def test_labels_and_scores_equal_the_reference_softmax(engines, dirs, fixture_models):
    got = await engines["classifier"].classify(ClassifyRequest(inputs=tuple(TEXTS)))
    weights = mx.load(str(dirs["classifier"] / "model.safetensors"))
    backbone = fixture_models["qwen3"]  # the same backbone weights, as mlx-lm loads them
    logits = reference_logits(backbone, TEXTS, np.array(weights["score.weight"], dtype=np.float64))
    for row, result in zip(logits, got):
        want = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        scores = {s.label: s.score for s in result.labels}
        assert set(scores) == set(LABELS)
        np.testing.assert_allclose([scores[name] for name in LABELS], want, atol=1e-4)
        assert [s.score for s in result.labels] == sorted(scores.values(), reverse=True)
    alone = [(await engines["classifier"].classify(ClassifyRequest(inputs=(t,))))[0] for t in TEXTS]
    for a, b in zip(alone, got):
        np.testing.assert_allclose([s.score for s in a.labels], [s.score for s in b.labels], atol=1e-5)


async def test_a_yes_no_reranker_scores_by_the_two_tokens_rows(engines, dirs):
    docs = ["It opened in 1842.", "Bread rises overnight.", "The quay was lengthened in 1911, after the railway."]
    got = await engines["reranker"].rerank(RerankRequest(query=QUERY, documents=tuple(docs)))
    no, yes = one_token_words(dirs["reranker"])
    import mlx_lm

    _, tokenizer = mlx_lm.load(str(dirs["reranker"]))
    weights = mx.load(str(dirs["reranker"] / "model.safetensors"))
    output = np.array(weights.get("lm_head.weight", weights["model.embed_tokens.weight"]), dtype=np.float64)
    row = output[tokenizer.encode(yes, add_special_tokens=False)[0]] - output[tokenizer.encode(no,
                                                                                     add_special_tokens=False)[0]]
    want = reference_logits(dirs["reranker"], [QUERY + d for d in docs], row[None])[:, 0]
    assert [s.index for s in got] == sorted(range(len(docs)), key=lambda i: -want[i])
    np.testing.assert_allclose([s.score for s in sorted(got, key=lambda s: s.index)], want, atol=1e-4)
    (probability,) = await engines["reranker"].classify(ClassifyRequest(inputs=(QUERY + docs[0],)))
    assert probability.labels[0].label == "yes"
    assert probability.labels[0].score == pytest.approx(1 / (1 + np.exp(-want[0])), abs=1e-4)


async def test_each_kind_says_what_it_serves_and_refuses_the_rest(engines):
    classifier, reranker = engines["classifier"], engines["reranker"]
    assert classifier.classifies and not classifier.reranks and not classifier.embeds
    assert reranker.classifies and reranker.reranks and not reranker.embeds
    c, r = classifier.describe().capabilities, reranker.describe().capabilities
    assert (c.classify, c.rerank, c.embeddings) == (True, False, False)
    assert (r.classify, r.rerank, r.embeddings) == (True, True, False)
    assert "sequence-classification" in classifier.describe().descriptor.id
    with pytest.raises(Unsupported, match="call Classify"):
        await classifier.rerank(RerankRequest(query="q", documents=("d",)))
    with pytest.raises(Unsupported, match="call Rerank or Classify"):
        async for _ in reranker.embed(EmbeddingRequest(inputs=("text",))):
            pass


@pytest.mark.parametrize("case", ["no score", "score of another shape", "a token of two", "untied, no output layer"])
async def test_malformed_checkpoints_are_refused_at_load(dirs, tmp_path, case):
    src = dirs["reranker" if case in ("a token of two", "untied, no output layer") else "classifier"]
    out = tmp_path / "m"
    shutil.copytree(src, out)
    config = json.loads((out / "config.json").read_text())
    weights = dict(mx.load(str(out / "model.safetensors")))
    match = {"no score": "without score.weight", "score of another shape": "score.weight has shape",
             "a token of two": "is not one token", "untied, no output layer": "no lm_head.weight"}[case]
    if case == "no score":
        weights.pop("score.weight")
    elif case == "score of another shape":
        weights["score.weight"] = mx.zeros((5, config["hidden_size"]))
    elif case == "a token of two":
        config["classifier_from_token"] = ["no", "harbourmaster"]
    else:
        config["tie_word_embeddings"] = False
        weights.pop("lm_head.weight", None)
    (out / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(out / "model.safetensors"), weights)
    engine = EmbeddingEngine(out, name="refused")
    with pytest.raises(UnsupportedModel, match=match):
        await engine.start()
    await engine.close()
