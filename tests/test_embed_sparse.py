"""EmbedSparse through the live server on the generated SPLADE model (and, engine only, its tied
variant with the head run one row at a time), against the whole model computed independently in
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

from engine.embedding import sparse
from engine.embedding.engine import EmbeddingEngine
from engine.embedding.sparse import nonzero_weights
from engine.errors import InvalidRequest, Unsupported
from engine.requests import ClassifyRequest, EmbeddingRequest, EmbedSparseRequest
from service.access_log import ACCESS_LOGGER
from service.bearer_tokens import load_table
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.server import ServerOptions, create_server
from tests import bert_reference
from tests.conftest import CLASSIFIER, DECODER_EMBEDDER, SPLADE
from tests.fixtures.cross_encoder import POSITIONS
from tests.fixtures.splade import build_splade
from tests.helpers import details
from tests.probe import probe

TEXTS = ("Rivers flow into lakes and oceans.", "def add(a, b): return a + b",
         "The assistant answered the question politely.", "Mountains rise above the valleys; forests cover them.",
         "Numbers: 0 1 2 3 4 5 6 7 8 9", "")
LONG = " ".join(["rivers flow into the ocean"] * 40)


def reference(model_dir, texts) -> list[np.ndarray]:
    """Each text's SPLADE weights over the vocabulary, the whole model in numpy."""
    tok = bert_reference.tokenizer(model_dir)
    return bert_reference.splade(model_dir, [tok.encode(t) for t in texts])


def dense(token_ids, weights, vocab: int) -> np.ndarray:
    out = np.zeros(vocab)
    out[list(token_ids)] = list(weights)
    return out


async def embed_sparse(stub, inputs, model: str = SPLADE, **kw) -> pb.EmbedSparseResponse:
    return await stub.EmbedSparse(pb.EmbedSparseRequest(model=model, inputs=list(inputs), **kw))


def test_nonzero_weights_keeps_the_heaviest_ascending_by_id():
    row = np.array([0, 0.5, 0, 2.0, 0.5, 1.0, 0], dtype=np.float32)
    ids, weights = nonzero_weights(row)
    assert ids.tolist() == [1, 3, 4, 5] and weights.tolist() == [0.5, 2.0, 0.5, 1.0]
    ids, weights = nonzero_weights(row, top_k=3)  # a tie at 0.5: the lower id stays
    assert ids.tolist() == [1, 3, 5] and weights.tolist() == [0.5, 2.0, 1.0]
    assert nonzero_weights(row, top_k=10)[0].tolist() == [1, 3, 4, 5]
    assert nonzero_weights(np.zeros(4, dtype=np.float32))[0].size == 0


async def test_weights_match_the_model_computed_independently(stub, splade_model):
    reply = await embed_sparse(stub, TEXTS)
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model=SPLADE))).info
    tok = bert_reference.tokenizer(splade_model)
    assert reply.model == SPLADE and [e.index for e in reply.embeddings] == list(range(len(TEXTS)))
    for e, text, want in zip(reply.embeddings, TEXTS, reference(splade_model, TEXTS)):
        assert e.tokens == len(tok.encode(text).ids)
        assert list(e.token_ids) == sorted(set(e.token_ids)) and all(w > 0 for w in e.weights)
        assert 0 < len(e.token_ids) < info.vocab_size  # the fixture's head leaves most of the vocabulary at 0
        np.testing.assert_allclose(dense(e.token_ids, e.weights, info.vocab_size), want, atol=1e-4)


async def test_top_k_keeps_the_heaviest_weights_ascending_by_id(stub):
    every = await embed_sparse(stub, TEXTS)
    top = await embed_sparse(stub, TEXTS, top_k=5)
    more = await embed_sparse(stub, TEXTS, top_k=100_000)
    for a, t, m in zip(every.embeddings, top.embeddings, more.embeddings):
        heaviest = sorted(zip(a.weights, a.token_ids), key=lambda p: (-p[0], p[1]))[:5]
        assert list(t.token_ids) == sorted(i for _, i in heaviest)
        assert list(t.weights) == [dict(zip(a.token_ids, a.weights))[i] for i in t.token_ids]
        assert list(m.token_ids) == list(a.token_ids) and list(m.weights) == list(a.weights)


async def test_a_batch_gets_what_each_input_gets_alone(stub):
    together = await embed_sparse(stub, TEXTS)
    alone = await asyncio.gather(*(embed_sparse(stub, [t]) for t in TEXTS))
    for e, single in zip(together.embeddings, alone):
        s = single.embeddings[0]
        assert e.tokens == s.tokens
        both = sorted(set(e.token_ids) | set(s.token_ids))
        np.testing.assert_allclose([dict(zip(e.token_ids, e.weights)).get(i, 0) for i in both],
                                   [dict(zip(s.token_ids, s.weights)).get(i, 0) for i in both], atol=2e-5)


async def test_a_long_input_is_cut_or_refused_as_asked(stub, splade_model):
    cut = await embed_sparse(stub, [TEXTS[0], LONG], truncate=pb.TRUNCATION_END)
    assert cut.embeddings[1].tokens == POSITIONS
    e, want = cut.embeddings[1], reference(splade_model, [LONG])[0]
    np.testing.assert_allclose(dense(e.token_ids, e.weights, len(want)), want, atol=1e-4)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await embed_sparse(stub, [TEXTS[0], LONG], truncate=pb.TRUNCATION_NONE)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["BadRequest"].field_violations[0].field == "inputs[1]"


async def test_the_default_model_is_the_first_sparse_one(stub):
    assert (await embed_sparse(stub, ["x"], model="")).model == SPLADE


@pytest.mark.parametrize("request_, code, field", [
    (pb.EmbedSparseRequest(model=SPLADE), grpc.StatusCode.INVALID_ARGUMENT, "inputs"),
    (pb.EmbedSparseRequest(model=SPLADE, inputs=["x"], top_k=-1), grpc.StatusCode.INVALID_ARGUMENT, "top_k"),
    (pb.EmbedSparseRequest(model=SPLADE, inputs=["x"], truncate=7), grpc.StatusCode.INVALID_ARGUMENT, "truncate"),
    (pb.EmbedSparseRequest(model=SPLADE, inputs=["x"] * 257), grpc.StatusCode.INVALID_ARGUMENT, "inputs"),
    (pb.EmbedSparseRequest(model=SPLADE, inputs=["x"], priority=101), grpc.StatusCode.INVALID_ARGUMENT, "priority"),
    (pb.EmbedSparseRequest(model=SPLADE, inputs=["x" * 100_000]), grpc.StatusCode.INVALID_ARGUMENT, "inputs[0]"),
    (pb.EmbedSparseRequest(model=DECODER_EMBEDDER, inputs=["x"]), grpc.StatusCode.FAILED_PRECONDITION, None),
    (pb.EmbedSparseRequest(model=CLASSIFIER, inputs=["x"]), grpc.StatusCode.FAILED_PRECONDITION, None),
    (pb.EmbedSparseRequest(model="llama", inputs=["x"]), grpc.StatusCode.FAILED_PRECONDITION, None),
    (pb.EmbedSparseRequest(model="nope", inputs=["x"]), grpc.StatusCode.NOT_FOUND, None),
])
async def test_wrong_embed_sparse_calls(stub, request_, code, field):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.EmbedSparse(request_)
    assert err.value.code() == code, err.value.details()
    if field:
        assert details(err.value)["BadRequest"].field_violations[0].field == field


async def test_too_many_inputs_in_a_large_request_are_refused_on_its_wire_bytes(stub):
    request = pb.EmbedSparseRequest(model=SPLADE, inputs=["word " * 60] * 300)  # ~90 KB: walked before parsing
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.EmbedSparse(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["ErrorInfo"].reason == "REQUEST_TOO_COMPLEX"


async def test_other_calls_on_a_sparse_model_are_refused_and_model_info_says_what_it_does(stub, splade_model):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Embed(pb.EmbedRequest(model=SPLADE, inputs=["x"])):
            pass
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "EmbedSparse" in err.value.details()
    for call, request in ((stub.Classify, pb.ClassifyRequest(model=SPLADE, inputs=["x"])),
                          (stub.Rerank, pb.RerankRequest(model=SPLADE, query="q", documents=["d"]))):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(request)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "EmbedSparse" in err.value.details()
    info = {m.name: m for m in (await stub.ListModels(pb.ListModelsRequest())).models}
    caps = info[SPLADE].capabilities
    assert caps.sparse_embeddings and not caps.embeddings and not caps.classify and not caps.rerank
    assert not caps.generation and info[SPLADE].embedding_dimensions == 0
    assert info[SPLADE].graph.id == "mlx-grpc/bert-splade" and info[SPLADE].context_length == POSITIONS
    assert info[SPLADE].vocab_size == bert_reference.tokenizer(splade_model).get_vocab_size()
    assert not any(m.capabilities.sparse_embeddings for name, m in info.items() if name != SPLADE)
    got = await stub.GetModelInfo(pb.GetModelInfoRequest(model=SPLADE))
    assert got.info.capabilities.sparse_embeddings


@pytest_asyncio.fixture(scope="module")
async def tied_engine(tmp_path_factory):
    engine = EmbeddingEngine(build_splade(tmp_path_factory.mktemp("splade-tied") / "tied", tied=True), name="tied")
    await engine.start()
    yield engine
    await engine.close()


async def test_a_tied_decoder_run_one_row_at_a_time_matches_the_reference(tied_engine, monkeypatch):
    monkeypatch.setattr(sparse, "LOGIT_BUDGET", 1)  # one row per head pass
    got = await tied_engine.embed_sparse(EmbedSparseRequest(inputs=TEXTS))
    vocab = tied_engine.model.vocab_size
    for e, want in zip(got, reference(tied_engine.source, TEXTS)):
        assert e.token_ids.dtype == np.int32 and e.weights.dtype == np.float32
        np.testing.assert_allclose(dense(e.token_ids, e.weights, vocab), want, atol=1e-4)


async def test_the_engine_refuses_other_calls_and_bad_requests_before_admission(tied_engine):
    assert tied_engine.embeds_sparse and not tied_engine.embeds and not tied_engine.classifies
    with pytest.raises(Unsupported, match="EmbedSparse"):
        await tied_engine.classify(ClassifyRequest(inputs=("x",)))
    with pytest.raises(Unsupported, match="EmbedSparse"):
        async for _ in tied_engine.embed(EmbeddingRequest(inputs=("x",))):
            pass
    for request, field in ((EmbedSparseRequest(inputs=()), "inputs"), (EmbedSparseRequest(inputs=("x",), top_k=-3),
                                                                       "top_k")):
        with pytest.raises(InvalidRequest) as err:
            await tied_engine.embed_sparse(request)
        assert err.value.field == field
    assert tied_engine.active == 0 and tied_engine.queued == 0


TOKENS = "tok-alpha alpha inference\ntok-beta beta inference\n"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest_asyncio.fixture
async def tenant_stub(server, tmp_path):
    path = tmp_path / "tokens"
    path.write_text(TOKENS)
    options = ServerOptions(auth_table=load_table(path, {}))
    srv, port = await create_server("127.0.0.1:0", server["models"], options=options)
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pb_grpc.InferenceServiceStub(channel)
    finally:
        await srv.stop(0.5)


async def test_a_tenant_cancels_only_its_own_embed_sparse_and_the_access_log_names_it(tenant_stub, server, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    engine = server["models"].sparse_embedder(SPLADE)
    gate = threading.Event()
    probe(engine, lambda core: gate.wait(30))  # the engine thread is busy: the request waits for its forward
    try:
        call = tenant_stub.EmbedSparse(pb.EmbedSparseRequest(model=SPLADE, inputs=list(TEXTS), request_id="shared"),
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
    again = await tenant_stub.EmbedSparse(pb.EmbedSparseRequest(model=SPLADE, inputs=["x"], request_id="shared"),
                                          metadata=bearer("tok-beta"))
    assert len(again.embeddings) == 1
    await asyncio.sleep(0.1)
    lines = [r.fields for r in caplog.records if r.name == ACCESS_LOGGER and getattr(r, "fields", None)
             and r.fields["method"].endswith("/EmbedSparse") and r.fields["request_id"] == "shared"]
    assert {(f["tenant"], f["code"], f["model"]) for f in lines} == {("alpha", "CANCELLED", SPLADE),
                                                                      ("beta", "OK", SPLADE)}
