"""Classify through the live server on the generated sequence classifiers (three labels, single-
and multi-label) and the one-label reranker, against the same models computed independently in
numpy; top_k, batching, truncation, the errors of each wrong call, the capability fact, and
tenants' request ids."""

from __future__ import annotations

import asyncio
import logging
import threading

import grpc
import numpy as np
import pytest
import pytest_asyncio

from service.access_log import ACCESS_LOGGER
from service.bearer_tokens import load_table
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.server import ServerOptions, create_server
from tests import bert_reference
from tests.conftest import CLASSIFIER, DECODER_EMBEDDER, MULTI_CLASSIFIER, RERANKER
from tests.fixtures.cross_encoder import LABELS, MULTI_LABELS, POSITIONS
from tests.helpers import details
from tests.probe import probe

TEXTS = ("Rivers flow into lakes and oceans.", "def add(a, b): return a + b",
         "The assistant answered the question politely.", "Mountains rise above the valleys; forests cover them.",
         "Numbers: 0 1 2 3 4 5 6 7 8 9", "")
LONG = " ".join(["rivers flow into the ocean"] * 40)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def reference(model_dir, texts, score) -> list[np.ndarray]:
    """Each text's label scores (label order), the whole model in numpy."""
    tok = bert_reference.tokenizer(model_dir)
    return [score(row) for row in bert_reference.logits(model_dir, [tok.encode(t) for t in texts])]


def by_label(result: pb.Classification) -> dict[str, float]:
    return {s.label: s.score for s in result.labels}


async def classify(stub, model: str, inputs, **kw) -> pb.ClassifyResponse:
    return await stub.Classify(pb.ClassifyRequest(model=model, inputs=list(inputs), **kw))


@pytest.mark.parametrize("model, labels, score", [(CLASSIFIER, LABELS, softmax), (MULTI_CLASSIFIER, MULTI_LABELS, sigmoid),
                                                  (RERANKER, ("LABEL_0",), sigmoid)])
async def test_scores_match_the_model_computed_independently_highest_first(stub, classifier_models, model, labels,
                                                                           score):
    reply = await classify(stub, model, TEXTS)
    want = reference(classifier_models[model], TEXTS, score)
    tok = bert_reference.tokenizer(classifier_models[model])
    assert reply.model == model and [r.index for r in reply.results] == list(range(len(TEXTS)))
    for r, text, expected in zip(reply.results, TEXTS, want):
        assert r.tokens == len(tok.encode(text).ids)
        assert sorted(by_label(r)) == sorted(labels) and len(r.labels) == len(labels)
        assert [s.score for s in r.labels] == sorted((s.score for s in r.labels), reverse=True)
        for i, label in enumerate(labels):
            assert by_label(r)[label] == pytest.approx(expected[i], abs=1e-4)


async def test_softmax_rows_sum_to_one_and_sigmoid_scores_do_not(stub):
    single = await classify(stub, CLASSIFIER, TEXTS)
    multi = await classify(stub, MULTI_CLASSIFIER, TEXTS)
    for r in single.results:
        assert sum(by_label(r).values()) == pytest.approx(1.0, abs=1e-5)
    assert any(abs(sum(by_label(r).values()) - 1) > 0.05 for r in multi.results)
    assert all(0 < s.score < 1 for r in multi.results for s in r.labels)


async def test_top_k_keeps_the_highest_labels(stub):
    every = await classify(stub, CLASSIFIER, TEXTS)
    top = await classify(stub, CLASSIFIER, TEXTS, top_k=2)
    more = await classify(stub, CLASSIFIER, TEXTS, top_k=10)  # more than the model has: all of them
    for a, t, m in zip(every.results, top.results, more.results):
        assert list(t.labels) == list(a.labels[:2]) and list(m.labels) == list(a.labels)


async def test_a_batch_gets_what_each_input_gets_alone(stub):
    together = await classify(stub, MULTI_CLASSIFIER, TEXTS)
    alone = await asyncio.gather(*(classify(stub, MULTI_CLASSIFIER, [t]) for t in TEXTS))
    for r, single in zip(together.results, alone):
        assert r.tokens == single.results[0].tokens
        assert [s.label for s in r.labels] == [s.label for s in single.results[0].labels]
        for s, o in zip(r.labels, single.results[0].labels):
            assert s.score == pytest.approx(o.score, abs=2e-5)


async def test_a_long_input_is_cut_or_refused_as_asked(stub, classifier_models):
    cut = await classify(stub, CLASSIFIER, [TEXTS[0], LONG])
    assert cut.results[1].tokens == POSITIONS
    want = reference(classifier_models[CLASSIFIER], [LONG], softmax)[0]
    for i, label in enumerate(LABELS):
        assert by_label(cut.results[1])[label] == pytest.approx(want[i], abs=1e-4)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await classify(stub, CLASSIFIER, [TEXTS[0], LONG], truncate=pb.TRUNCATION_NONE)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["BadRequest"].field_violations[0].field == "inputs[1]"


async def test_the_default_model_is_the_first_labelled_classifier(stub):
    assert (await classify(stub, "", ["x"])).model == CLASSIFIER


@pytest.mark.parametrize("request_, code, field", [
    (pb.ClassifyRequest(model=CLASSIFIER), grpc.StatusCode.INVALID_ARGUMENT, "inputs"),
    (pb.ClassifyRequest(model=CLASSIFIER, inputs=["x"], top_k=-1), grpc.StatusCode.INVALID_ARGUMENT, "top_k"),
    (pb.ClassifyRequest(model=CLASSIFIER, inputs=["x"], truncate=7), grpc.StatusCode.INVALID_ARGUMENT, "truncate"),
    (pb.ClassifyRequest(model=CLASSIFIER, inputs=["x"] * 257), grpc.StatusCode.INVALID_ARGUMENT, "inputs"),
    (pb.ClassifyRequest(model=CLASSIFIER, inputs=["x"], priority=101), grpc.StatusCode.INVALID_ARGUMENT, "priority"),
    (pb.ClassifyRequest(model=DECODER_EMBEDDER, inputs=["x"]), grpc.StatusCode.FAILED_PRECONDITION, None),
    (pb.ClassifyRequest(model="llama", inputs=["x"]), grpc.StatusCode.FAILED_PRECONDITION, None),
    (pb.ClassifyRequest(model="nope", inputs=["x"]), grpc.StatusCode.NOT_FOUND, None),
])
async def test_wrong_classify_calls(stub, request_, code, field):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Classify(request_)
    assert err.value.code() == code, err.value.details()
    if field:
        assert details(err.value)["BadRequest"].field_violations[0].field == field


async def test_too_many_inputs_in_a_large_request_are_refused_on_its_wire_bytes(stub):
    request = pb.ClassifyRequest(model=CLASSIFIER, inputs=["word " * 60] * 300)  # ~90 KB: walked before parsing
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Classify(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["ErrorInfo"].reason == "REQUEST_TOO_COMPLEX"
    assert details(err.value)["BadRequest"].field_violations[0].field == "inputs"


async def test_embed_and_rerank_on_a_classifier_are_refused_and_model_info_says_which_is_which(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Embed(pb.EmbedRequest(model=CLASSIFIER, inputs=["x"])):
            pass
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Rerank(pb.RerankRequest(model=CLASSIFIER, query="q", documents=["d"]))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = {m.name: m for m in (await stub.ListModels(pb.ListModelsRequest())).models}
    for name in (CLASSIFIER, MULTI_CLASSIFIER):
        caps = info[name].capabilities
        assert caps.classify and not caps.rerank and not caps.embeddings and not caps.generation
        assert info[name].embedding_dimensions == 0 and info[name].context_length == POSITIONS
    assert info[RERANKER].capabilities.classify and info[RERANKER].capabilities.rerank
    assert not info[DECODER_EMBEDDER].capabilities.classify and not info["llama"].capabilities.classify
    got = await stub.GetModelInfo(pb.GetModelInfoRequest(model=MULTI_CLASSIFIER))
    assert got.info.capabilities.classify


TOKENS = "tok-alpha alpha inference\ntok-beta beta inference\n"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest_asyncio.fixture
async def tenant_stub(server, tmp_path):
    path = tmp_path / "tokens"
    path.write_text(TOKENS)
    srv, port = await create_server("127.0.0.1:0", server["models"], options=ServerOptions(auth_table=load_table(path, {})))
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pb_grpc.InferenceServiceStub(channel)
    finally:
        await srv.stop(0.5)


async def test_a_tenant_cancels_only_its_own_classify_and_the_access_log_names_it(tenant_stub, server, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    engine = server["models"].classifier(CLASSIFIER)
    gate = threading.Event()
    probe(engine, lambda core: gate.wait(30))  # the engine thread is busy: the request waits for its forward
    try:
        call = tenant_stub.Classify(pb.ClassifyRequest(model=CLASSIFIER, inputs=list(TEXTS), request_id="shared"),
                                    metadata=bearer("tok-alpha"))
        for _ in range(500):
            if engine.holds("shared", "alpha"):
                break
            await asyncio.sleep(0.01)
        refused = await tenant_stub.Cancel(pb.CancelRequest(request_id="shared"), metadata=bearer("tok-beta"))
        assert not refused.cancelled
        assert (await tenant_stub.Cancel(pb.CancelRequest(request_id="shared"), metadata=bearer("tok-alpha"))).cancelled
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.CANCELLED
    finally:
        gate.set()
    again = await tenant_stub.Classify(pb.ClassifyRequest(model=CLASSIFIER, inputs=["x"], request_id="shared"),
                                       metadata=bearer("tok-beta"))
    assert len(again.results) == 1
    await asyncio.sleep(0.1)
    lines = [r.fields for r in caplog.records if r.name == ACCESS_LOGGER and getattr(r, "fields", None)
             and r.fields["method"].endswith("/Classify") and r.fields["request_id"] == "shared"]
    assert {(f["tenant"], f["code"], f["model"]) for f in lines} == {("alpha", "CANCELLED", CLASSIFIER),
                                                                      ("beta", "OK", CLASSIFIER)}
