"""Rerank against a live server's model named "reranker" (the fixture server serves one: a
small random-weight cross-encoder, so its scores mean nothing, but their order, top_n and
truncation hold). Without a "reranker" model these skip, also with MLXGRPC_REQUIRE_LIVE=1:
the default server never has one."""

from __future__ import annotations

import grpc
import pytest

from mlxgrpc_client import error_details, pb

from _support import over_long

QUERY = "where do rivers flow?"
DOCUMENTS = ["Rivers flow into lakes and oceans.", "def add(a, b): return a + b",
             "The assistant answered the question politely.",
             "Mountains rise above the valleys; forests cover them.", "Numbers: 0 1 2 3 4 5 6 7 8 9"]


@pytest.fixture(scope="module")
def reranker(models) -> pb.ModelInfo:
    found = [m for m in models if m.name == "reranker"]
    if not found:  # a plain skip: the default server never has this model
        pytest.skip("the server has no model named 'reranker' (the fixture server serves one; the default never does)")
    assert found[0].capabilities.rerank, found[0].capabilities
    return found[0]


def check_ranking(reply: pb.RerankResponse, documents=DOCUMENTS) -> None:
    """Every document once, by descending score, each with the tokens it used."""
    assert reply.model == "reranker"
    scores = [r.score for r in reply.results]
    assert scores == sorted(scores, reverse=True)
    assert sorted(r.index for r in reply.results) == list(range(len(documents)))
    assert all(r.tokens > 0 for r in reply.results)


def test_model_info_reports_a_reranker(client, reranker):
    capabilities = client.model_info("reranker").capabilities
    assert capabilities.rerank is True and capabilities.embeddings is False
    assert reranker.kind == pb.MODEL_KIND_EMBEDDING and reranker.context_length > 0


def test_rerank_scores_every_document_most_relevant_first(client, reranker):
    reply = client.rerank(QUERY, DOCUMENTS, model="reranker")
    check_ranking(reply)
    again = client.rerank(QUERY, DOCUMENTS, model="reranker", request_id="rerank-live-1", priority=-10)
    assert [r.index for r in again.results] == [r.index for r in reply.results]
    assert [r.score for r in again.results] == pytest.approx([r.score for r in reply.results], abs=1e-5)


def test_top_n_returns_the_first_of_the_full_ranking(client, reranker):
    every = client.rerank(QUERY, DOCUMENTS, model="reranker")
    top = client.rerank(QUERY, DOCUMENTS, model="reranker", top_n=2)
    assert len(top.results) == 2
    assert [r.index for r in top.results] == [r.index for r in every.results[:2]]
    assert [r.score for r in top.results] == pytest.approx([r.score for r in every.results[:2]], abs=1e-5)
    assert len(client.rerank(QUERY, DOCUMENTS, model="reranker", top_n=len(DOCUMENTS) + 3).results) == len(DOCUMENTS)


def test_a_long_document_is_cut_or_refused_as_asked(client, reranker):
    documents = [DOCUMENTS[0], over_long(reranker)]
    cut = client.rerank(QUERY, documents, model="reranker")  # the default: cut to the limit
    check_ranking(cut, documents)
    assert {r.index: r.tokens for r in cut.results}[1] == reranker.context_length
    end = client.rerank(QUERY, documents, model="reranker", truncate="end")
    assert [r.index for r in end.results] == [r.index for r in cut.results]
    with pytest.raises(grpc.RpcError) as info:
        client.rerank(QUERY, documents, model="reranker", truncate="none")
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT, details.message
    assert [v.field for v in details.field_violations] == ["documents[1]"]


def test_wrong_rerank_calls(client, reranker, models):
    with pytest.raises(grpc.RpcError) as info:
        client.rerank(QUERY, [], model="reranker")  # no documents
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as info:
        client.rerank(QUERY, DOCUMENTS, model="no-such-model")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as info:
        client.embed("x", model="reranker")  # a reranker does not embed
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    embedders = [m for m in models if m.capabilities.embeddings]
    if embedders:  # an embedding model does not rerank
        with pytest.raises(grpc.RpcError) as info:
            client.rerank(QUERY, DOCUMENTS, model=embedders[0].name)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_rerank_in_asyncio(aclient, client, reranker):
    reply = await aclient.rerank(QUERY, DOCUMENTS, model="reranker", top_n=3)
    assert len(reply.results) == 3
    blocking = client.rerank(QUERY, DOCUMENTS, model="reranker")
    assert [r.index for r in reply.results] == [r.index for r in blocking.results[:3]]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await aclient.rerank(QUERY, [over_long(reranker)], model="reranker", truncate=pb.TRUNCATION_NONE)
    assert error_details(info.value).code == grpc.StatusCode.INVALID_ARGUMENT
