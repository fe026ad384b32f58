"""Rerank through a live server on a generated cross-encoder, against the same model computed
independently in numpy; truncation on Rerank and Embed; the errors of each wrong call."""

from __future__ import annotations

import grpc
import pytest
import pytest_asyncio

from engine.embedding.engine import EmbeddingEngine
from engine.models import ModelSet
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from tests import bert_reference
from tests.fixtures.cross_encoder import POSITIONS, build_cross_encoder
from tests.helpers import details
from tests.test_ops_security import extra_server

QUERY = "where do rivers flow?"
DOCUMENTS = ("Rivers flow into lakes and oceans.", "def add(a, b): return a + b",
             "The assistant answered the question politely.", "Mountains rise above the valleys; forests cover them.",
             "Numbers: 0 1 2 3 4 5 6 7 8 9")


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory):
    return build_cross_encoder(tmp_path_factory.mktemp("cross-encoder") / "reranker")


@pytest_asyncio.fixture(scope="module")
async def stub(reranker_dir, fixture_models):
    engines = [EmbeddingEngine(reranker_dir, name="reranker"), EmbeddingEngine(fixture_models["qwen3"], name="emb")]
    models = ModelSet([], engines)
    await models.start()
    async with extra_server(models) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield pb_grpc.InferenceServiceStub(channel)
    await models.close()


def numpy_scores(model_dir, query: str, documents) -> list[float]:
    """The classifier's logits, BERT written out in numpy from the checkpoint and tokenizer.json."""
    tok = bert_reference.tokenizer(model_dir)
    return [float(row[0]) for row in bert_reference.logits(model_dir, [tok.encode(query, doc) for doc in documents])]


async def test_scores_match_the_model_computed_independently_most_relevant_first(stub, reranker_dir):
    reply = await stub.Rerank(pb.RerankRequest(query=QUERY, documents=DOCUMENTS))
    want = numpy_scores(reranker_dir, QUERY, DOCUMENTS)
    assert reply.model == "reranker" and sorted(r.index for r in reply.results) == list(range(len(DOCUMENTS)))
    assert [r.score for r in reply.results] == sorted((r.score for r in reply.results), reverse=True)
    for r in reply.results:
        assert r.score == pytest.approx(want[r.index], abs=1e-4)
    assert [r.index for r in reply.results] == sorted(range(len(DOCUMENTS)), key=lambda i: -want[i])


async def test_top_n_keeps_the_highest_and_repeats_give_the_same_scores(stub):
    every = await stub.Rerank(pb.RerankRequest(query=QUERY, documents=DOCUMENTS))
    top = await stub.Rerank(pb.RerankRequest(query=QUERY, documents=DOCUMENTS, top_n=2))
    assert list(top.results) == list(every.results[:2])


async def test_a_long_pair_is_cut_or_refused_as_asked(stub, reranker_dir):
    long = " ".join(["rivers flow into the ocean"] * 40)
    cut = await stub.Rerank(pb.RerankRequest(query=QUERY, documents=[long, DOCUMENTS[0]]))
    by_index = {r.index: r for r in cut.results}
    assert by_index[0].tokens == POSITIONS
    assert by_index[0].score == pytest.approx(numpy_scores(reranker_dir, QUERY, [long])[0], abs=1e-4)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Rerank(pb.RerankRequest(query=QUERY, documents=[DOCUMENTS[0], long],
                                           truncate=pb.TRUNCATION_NONE))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["BadRequest"].field_violations[0].field == "documents[1]"


async def test_embed_refuses_an_over_long_input_when_truncation_is_off(stub):
    long = "word " * 5000
    cut = [r async for r in stub.Embed(pb.EmbedRequest(model="emb", inputs=["short", long]))]
    assert len(cut) == 2
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Embed(pb.EmbedRequest(model="emb", inputs=["short", long], truncate=pb.TRUNCATION_NONE)):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["BadRequest"].field_violations[0].field == "inputs[1]"


@pytest.mark.parametrize("request_, code", [
    (pb.RerankRequest(query="q"), grpc.StatusCode.INVALID_ARGUMENT),  # no documents
    (pb.RerankRequest(query="q", documents=["d"], top_n=-1), grpc.StatusCode.INVALID_ARGUMENT),
    (pb.RerankRequest(query="q", documents=["d"], truncate=7), grpc.StatusCode.INVALID_ARGUMENT),
    (pb.RerankRequest(model="emb", query="q", documents=["d"]), grpc.StatusCode.FAILED_PRECONDITION),
    (pb.RerankRequest(model="nope", query="q", documents=["d"]), grpc.StatusCode.NOT_FOUND),
])
async def test_wrong_rerank_calls(stub, request_, code):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Rerank(request_)
    assert err.value.code() == code, err.value.details()


async def test_embed_on_a_reranker_is_refused_and_model_info_says_which_is_which(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Embed(pb.EmbedRequest(model="reranker", inputs=["x"])):
            pass
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = {m.name: m.capabilities for m in (await stub.ListModels(pb.ListModelsRequest())).models}
    assert info["reranker"].rerank and not info["reranker"].embeddings
    assert info["emb"].embeddings and not info["emb"].rerank
    default = [r async for r in stub.Embed(pb.EmbedRequest(inputs=["x"]))]  # the default skips the reranker
    assert len(default) == 1
