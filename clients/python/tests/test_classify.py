"""Classify against a live server's models named "classifier" (three labels, single-label:
softmax scores) and "classifier-multi" (three labels, multi-label: sigmoid scores), and its
"reranker" (one label); the fixture server serves all three: small random-weight models, so
their scores mean nothing, but their sums, order, top_k and truncation hold. Without a
"classifier" model these skip, also with MLXGRPC_REQUIRE_LIVE=1: the default server never
has one."""

from __future__ import annotations

import grpc
import pytest

from mlxgrpc_client import error_details, pb

from _support import over_long

TEXTS = ["I loved this film.", "The service was slow and the food cold.", "Rivers flow into lakes and oceans."]


def served(models, name: str) -> pb.ModelInfo:
    found = [m for m in models if m.name == name]
    if not found:  # a plain skip: the default server never has this model
        pytest.skip(f"the server has no model named {name!r} (the fixture server serves one; the default never does)")
    return found[0]


@pytest.fixture(scope="module")
def classifier(models) -> pb.ModelInfo:
    return served(models, "classifier")


def check(reply: pb.ClassifyResponse, model: str, inputs=TEXTS, labels: int = 3) -> None:
    """One result per input, in input order, each with its labels highest first."""
    assert reply.model == model
    assert [r.index for r in reply.results] == list(range(len(inputs)))
    for r in reply.results:
        scores = [s.score for s in r.labels]
        assert len(r.labels) == labels and scores == sorted(scores, reverse=True)
        assert all(0 <= s <= 1 for s in scores) and r.tokens > 0


def test_model_info_reports_a_classifier(client, classifier):
    capabilities = client.model_info("classifier").capabilities
    assert capabilities.classify and not capabilities.rerank and not capabilities.embeddings
    assert classifier.kind == pb.MODEL_KIND_EMBEDDING and classifier.context_length > 0


def test_single_label_scores_sum_to_one(client, classifier):
    reply = client.classify(TEXTS, model="classifier")
    check(reply, "classifier")
    for r in reply.results:
        assert sum(s.score for s in r.labels) == pytest.approx(1, abs=1e-5)
        assert len({s.label for s in r.labels}) == 3


def test_multi_label_scores_are_each_labels_own(client, models):
    served(models, "classifier-multi")
    reply = client.classify(TEXTS, model="classifier-multi")
    check(reply, "classifier-multi")
    assert any(abs(sum(s.score for s in r.labels) - 1) > 1e-3 for r in reply.results)


def test_a_reranker_classifies_with_its_one_label(client, models):
    served(models, "reranker")
    reply = client.classify(TEXTS, model="reranker")
    check(reply, "reranker", labels=1)


def test_top_k_and_batches_agree_with_single_calls(client, classifier):
    every = client.classify(TEXTS, model="classifier")
    top = client.classify(TEXTS, model="classifier", top_k=1, request_id="classify-live-1", priority=-10)
    for a, t in zip(every.results, top.results):
        assert [s.label for s in t.labels] == [a.labels[0].label]
    alone = client.classify(TEXTS[1], model="classifier")
    assert [s.label for s in alone.results[0].labels] == [s.label for s in every.results[1].labels]
    assert [s.score for s in alone.results[0].labels] == pytest.approx([s.score for s in every.results[1].labels],
                                                                       abs=1e-5)


def test_a_long_input_is_cut_or_refused_as_asked(client, classifier):
    inputs = [TEXTS[0], over_long(classifier)]
    cut = client.classify(inputs, model="classifier")  # the default: cut to the limit
    check(cut, "classifier", inputs)
    assert cut.results[1].tokens == classifier.context_length
    with pytest.raises(grpc.RpcError) as info:
        client.classify(inputs, model="classifier", truncate="none")
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT, details.message
    assert [v.field for v in details.field_violations] == ["inputs[1]"]


def test_wrong_classify_calls(client, classifier, models):
    for kwargs, code, field in ((dict(inputs=[]), grpc.StatusCode.INVALID_ARGUMENT, "inputs"),
                                (dict(inputs=TEXTS, top_k=-1), grpc.StatusCode.INVALID_ARGUMENT, "top_k"),
                                (dict(inputs=TEXTS, model="no-such-model"), grpc.StatusCode.NOT_FOUND, None)):
        kwargs.setdefault("model", "classifier")
        with pytest.raises(grpc.RpcError) as info:
            client.classify(**kwargs)
        details = error_details(info.value)
        assert details.code == code, details.message
        assert field is None or [v.field for v in details.field_violations] == [field]
    with pytest.raises(grpc.RpcError) as info:
        client.embed("x", model="classifier")  # a classifier does not embed
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    embedders = [m for m in models if m.capabilities.embeddings]
    if embedders:  # an embedding model does not classify
        with pytest.raises(grpc.RpcError) as info:
            client.classify(TEXTS, model=embedders[0].name)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_classify_in_asyncio(aclient, client, classifier):
    reply = await aclient.classify(TEXTS, model="classifier", top_k=2)
    blocking = client.classify(TEXTS, model="classifier")
    for r, b in zip(reply.results, blocking.results):
        assert [s.label for s in r.labels] == [s.label for s in b.labels[:2]]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await aclient.classify([over_long(classifier)], model="classifier", truncate=pb.TRUNCATION_NONE)
    assert error_details(info.value).code == grpc.StatusCode.INVALID_ARGUMENT
