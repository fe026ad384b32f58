"""EmbedSparse against a live server's model named "splade" (a small random-weight SPLADE
model in the fixture server): its weights mean nothing, but their form holds (ids ascending,
weights above 0, one vector per input in input order), as do top_k, batching and truncation.
Without a "splade" model these skip, also with MLXGRPC_REQUIRE_LIVE=1: the default server
never has one."""

from __future__ import annotations

import grpc
import pytest

from mlxgrpc_client import SparseEmbeddings, SparseVector, error_details, pb

from _support import over_long

TEXTS = ["Where do rivers flow?", "Rivers flow into lakes and oceans.", "def add(a, b): return a + b"]


@pytest.fixture(scope="module")
def splade(models) -> pb.ModelInfo:
    found = [m for m in models if m.name == "splade"]
    if not found:  # a plain skip: the default server never has this model
        pytest.skip("the server has no model named 'splade' (the fixture server serves one; the default never does)")
    return found[0]


def check(reply: SparseEmbeddings, inputs=TEXTS, vocab: int = 0) -> None:
    """One vector per input, in input order: ids ascending within the vocabulary, weights above 0."""
    assert reply.model == "splade" and len(reply) == len(inputs)
    assert [v.index for v in reply] == list(range(len(inputs)))
    for v in reply:
        assert isinstance(v, SparseVector) and v.tokens > 0 and len(v.token_ids) == len(v.weights) > 0
        assert list(v.token_ids) == sorted(set(v.token_ids)) and all(w > 0 for w in v.weights)
        assert not vocab or v.token_ids[-1] < vocab


def test_model_info_reports_a_sparse_model(client, splade):
    capabilities = client.model_info("splade").capabilities
    assert capabilities.sparse_embeddings and not capabilities.embeddings and not capabilities.classify
    assert splade.kind == pb.MODEL_KIND_EMBEDDING and splade.embedding_dimensions == 0 and splade.vocab_size > 0


def test_vectors_in_input_order(client, splade):
    reply = client.embed_sparse(TEXTS, model="splade")
    check(reply, vocab=splade.vocab_size)
    assert reply[0].dot(reply[0]) == pytest.approx(sum(w * w for w in reply[0].weights))
    assert reply[0].as_dict() == dict(zip(reply[0].token_ids, reply[0].weights))


def test_top_k_and_batches_agree_with_single_calls(client, splade):
    every = client.embed_sparse(TEXTS, model="splade")
    top = client.embed_sparse(TEXTS, model="splade", top_k=3, request_id="sparse-live-1", priority=-10)
    check(top)
    for a, t in zip(every, top):
        heaviest = sorted(zip(a.weights, a.token_ids), key=lambda p: (-p[0], p[1]))[:3]
        assert list(t.token_ids) == sorted(i for _, i in heaviest)
    alone = client.embed_sparse(TEXTS[1], model="splade")[0]
    assert alone.token_ids == every[1].token_ids
    assert list(alone.weights) == pytest.approx(list(every[1].weights), abs=1e-5)


def test_a_long_input_is_cut_or_refused_as_asked(client, splade):
    inputs = [TEXTS[0], over_long(splade)]
    cut = client.embed_sparse(inputs, model="splade")  # the default: cut to the limit
    check(cut, inputs)
    assert cut[1].tokens == splade.context_length
    with pytest.raises(grpc.RpcError) as info:
        client.embed_sparse(inputs, model="splade", truncate="none")
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT, details.message
    assert [v.field for v in details.field_violations] == ["inputs[1]"]


def test_wrong_embed_sparse_calls(client, splade, models):
    for kwargs, code, field in ((dict(inputs=[]), grpc.StatusCode.INVALID_ARGUMENT, "inputs"),
                                (dict(inputs=TEXTS, top_k=-1), grpc.StatusCode.INVALID_ARGUMENT, "top_k"),
                                (dict(inputs=TEXTS, model="no-such-model"), grpc.StatusCode.NOT_FOUND, None)):
        kwargs.setdefault("model", "splade")
        with pytest.raises(grpc.RpcError) as info:
            client.embed_sparse(**kwargs)
        details = error_details(info.value)
        assert details.code == code, details.message
        assert field is None or [v.field for v in details.field_violations] == [field]
    with pytest.raises(grpc.RpcError) as info:
        client.embed("x", model="splade")  # a SPLADE model does not pool embeddings
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    embedders = [m for m in models if m.capabilities.embeddings]
    if embedders:  # an embedding model has no sparse vectors
        with pytest.raises(grpc.RpcError) as info:
            client.embed_sparse(TEXTS, model=embedders[0].name)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_embed_sparse_in_asyncio(aclient, client, splade):
    reply = await aclient.embed_sparse(TEXTS, model="splade", top_k=2)
    check(reply)
    assert all(len(v.token_ids) == 2 for v in reply)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await aclient.embed_sparse([over_long(splade)], model="splade", truncate=pb.TRUNCATION_NONE)
    assert error_details(info.value).code == grpc.StatusCode.INVALID_ARGUMENT
