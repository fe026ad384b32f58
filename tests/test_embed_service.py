"""Embed through the live server: one response per input, streamed, correct vectors."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import model_pb2
from tests.conftest import (CLASSIFIER, DECODER_EMBED_TEXTS, DECODER_EMBEDDER, HAS_MINILM, MINILM, MULTI_CLASSIFIER,
                            RERANKER, SPLADE)

needs_minilm = pytest.mark.skipif(not HAS_MINILM, reason="needs the embedded MiniLM")

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today."]


async def embed(stub, inputs, **kw) -> dict[int, pb.EmbedResponse]:
    out = {}
    async for reply in stub.Embed(pb.EmbedRequest(inputs=inputs, **kw)):
        assert reply.index not in out
        out[reply.index] = reply
    return out


@needs_minilm
async def test_similarity_through_the_service(stub):
    replies = await embed(stub, SENTENCES)
    assert sorted(replies) == [0, 1, 2]
    vectors = [np.array(replies[i].embedding) for i in range(3)]
    assert all(len(v) == 384 and abs(np.linalg.norm(v) - 1) < 1e-5 for v in vectors)
    assert vectors[0] @ vectors[1] > 0.7
    assert vectors[0] @ vectors[2] < 0.2
    assert replies[0].tokens == 8


@needs_minilm
async def test_many_inputs_stream_in_batches_and_repeats_come_from_the_object_cache(stub, server):
    inputs = [f"sentence number {i} about {'boats' if i % 2 else 'gulls'}" for i in range(70)]
    first = await embed(stub, inputs)
    engine = server["models"].embedder(MINILM)
    hits = engine.cache_hits
    again = await embed(stub, inputs)  # served from the object cache
    assert engine.cache_hits == hits + 70
    assert sorted(first) == list(range(70))
    for i in range(70):
        assert first[i].embedding == again[i].embedding


@needs_minilm
async def test_dimensions_normalize_and_instruction(stub):
    whole = (await embed(stub, SENTENCES[:1]))[0].embedding
    cut = np.array((await embed(stub, SENTENCES[:1], dimensions=32))[0].embedding)
    assert len(cut) == 32 and abs(np.linalg.norm(cut) - 1) < 1e-5
    np.testing.assert_allclose(cut, np.array(whole[:32]) / np.linalg.norm(whole[:32]), atol=1e-6)
    raw = np.array((await embed(stub, SENTENCES[:1], normalize=False))[0].embedding)
    assert abs(np.linalg.norm(raw) - 1) > 1e-3
    np.testing.assert_allclose(raw / np.linalg.norm(raw), whole, atol=1e-6)
    query = (await embed(stub, SENTENCES[:1], instruction="Find similar sentences"))[0]
    assert query.tokens > 8 and query.embedding != whole


@pytest.mark.parametrize("kwargs,field", [
    (dict(inputs=[]), "inputs"),
    (dict(inputs=["x"], dimensions=385), "dimensions"),
    (dict(inputs=["x"], dimensions=-1), "dimensions"),
    (dict(inputs=["x"] * 257), "inputs"),
])
@needs_minilm
async def test_invalid_embed_requests(stub, kwargs, field):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await embed(stub, **kwargs)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()


@needs_minilm
async def test_capabilities_match_behaviour(stub):
    """Each declared capability is checked against what the server does."""
    models = (await stub.ListModels(pb.ListModelsRequest())).models
    for info in models:
        caps = info.capabilities
        embed_works = generate_works = classify_works = sparse_works = True
        try:
            await embed(stub, ["probe"], model=info.name)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            embed_works = False
        try:
            await stub.Classify(pb.ClassifyRequest(model=info.name, inputs=["probe"]))
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            classify_works = False
        try:
            await stub.EmbedSparse(pb.EmbedSparseRequest(model=info.name, inputs=["probe"]))
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            sparse_works = False
        call = stub.Generate(pb.GenerateRequest(model=info.name, text="probe"))
        try:
            assert (await call.read()).WhichOneof("event") == "started"
            call.cancel()
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            generate_works = False
        assert caps.embeddings == embed_works, info.name
        assert caps.generation == generate_works, info.name
        assert caps.classify == classify_works, info.name
        assert caps.sparse_embeddings == sparse_works, info.name
        assert (info.embedding_dimensions > 0) == embed_works
        assert (info.kind == model_pb2.MODEL_KIND_EMBEDDING) == (
            info.name in (MINILM, DECODER_EMBEDDER, RERANKER, CLASSIFIER, MULTI_CLASSIFIER, SPLADE))
        assert not caps.compiled_decode and not caps.sparse_attention
        # a generation model's layers feed a draft head wherever its drafts can be verified
        assert caps.hidden_layer_taps == (generate_works and bool(caps.speculation.modes)), info.name
        assert not caps.HasField("media") and not caps.HasField("native_draft")


@pytest.mark.plumbing  # the object cache's accounting, not numerics
async def test_the_object_cache_counts_what_its_keys_hold(stub, server):
    """Each cached vector is keyed by its input and instruction: those bytes count
    against the cache's budget (a long instruction once added far more than counted)."""
    engine = server["models"].embedder(DECODER_EMBEDDER)
    before = engine.cache_bytes
    instruction = "Retrieve passages about lighthouses and the sea " * 160  # ~7.8 KB
    inputs = [f"keeper {i} of the light" for i in range(4)]
    replies = await embed(stub, inputs, model=DECODER_EMBEDDER, instruction=instruction)
    assert sorted(replies) == [0, 1, 2, 3]
    assert engine.cache_bytes - before >= 4 * len(instruction)


async def test_decoder_last_token_pooling_matches_direct_and_batched(stub, decoder_embedding_reference):
    """The decoder embedding convention through Embed: a right-padded batch equals direct
    one-at-a-time pooling (computed before the server started) within 1e-5."""
    batched = await embed(stub, DECODER_EMBED_TEXTS, model=DECODER_EMBEDDER)
    for i, reference in enumerate(decoder_embedding_reference):
        np.testing.assert_allclose(batched[i].embedding, reference, atol=1e-5)
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model=DECODER_EMBEDDER))).info
    assert info.capabilities.embeddings and not info.capabilities.generation
    assert info.graph.id == "mlx-lm/qwen3+last-token-pooling"
    assert len(batched[0].embedding) == info.embedding_dimensions
