"""Concurrent Embed requests share forwards: each gets exactly the vectors it gets alone, in
its own indices, while the engine runs fewer forwards than requests; a cancelled request's
inputs leave the queue without disturbing the others."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import pytest_asyncio

from engine.embedding.config import EmbeddingConfig
from engine.embedding.engine import EmbeddingEngine
from engine.loading.embedded import default_embedding_model
from engine.requests import EmbeddingRequest
from tests.conftest import HAS_MINILM

WORDS = "harbour lantern comet orchard glacier violin meadow tunnel island bridge engine castle".split()


def texts_of(i: int) -> tuple[str, ...]:
    """1-4 inputs of different lengths, different for every request."""
    return tuple(" ".join(WORDS[(i + j + k) % len(WORDS)] for k in range(3 + 5 * j + i % 7))
                 for j in range(1 + i % 4))


@pytest_asyncio.fixture(params=["encoder", "decoder"])
async def engine(request, fixture_models):
    if request.param == "encoder" and not HAS_MINILM:
        pytest.skip("the embedded MiniLM is not installed")
    source = default_embedding_model() if request.param == "encoder" else fixture_models["qwen3"]
    e = EmbeddingEngine(source, name=f"batched-{request.param}", config=EmbeddingConfig(batch_wait_s=0.01))
    await e.start()
    yield e
    await e.close()


async def embed(engine, texts, request_id="", **options) -> dict[int, np.ndarray]:
    return {i: r.vector async for i, r in engine.embed(EmbeddingRequest(inputs=texts, request_id=request_id,
                                                                       **options))}


async def test_concurrent_requests_share_forwards_and_get_their_own_vectors(engine):
    requests = [texts_of(i) for i in range(16)]
    # each request alone, through the model's own per-request batching (never through the engine,
    # whose object cache would then answer the shared run)
    alone = [dict(enumerate(r.vector for r in engine.model.embed(list(texts)))) for texts in requests]
    before = engine.forwards
    together = await asyncio.gather(*(embed(engine, texts) for texts in requests))
    forwards = engine.forwards - before
    assert forwards < len(requests) / 2, forwards  # 16 requests, 40 inputs
    for got, want, texts in zip(together, alone, requests):
        assert sorted(got) == list(range(len(texts)))
        for i in got:
            np.testing.assert_allclose(got[i], want[i], atol=2e-5)


async def test_options_stay_per_request_inside_a_shared_forward(engine):
    texts = texts_of(3)
    plain, short, raw = await asyncio.gather(embed(engine, texts), embed(engine, texts, dimensions=8),
                                             embed(engine, texts, normalize=False))
    for i in plain:
        assert short[i].shape == (8,) and abs(np.linalg.norm(short[i]) - 1) < 1e-5
        np.testing.assert_allclose(raw[i] / np.linalg.norm(raw[i]), plain[i], atol=2e-5)


async def test_a_cancelled_request_leaves_the_queue_and_the_others_finish(engine):
    async def slow_forward_first():
        return await embed(engine, tuple(" ".join(WORDS * 8) for _ in range(8)))

    first = asyncio.create_task(slow_forward_first())
    await asyncio.sleep(0)
    doomed = asyncio.create_task(embed(engine, texts_of(5), request_id="doomed"))
    others = [asyncio.create_task(embed(engine, texts_of(i))) for i in range(6, 9)]
    await asyncio.sleep(0.001)
    doomed.cancel()
    await asyncio.gather(first, *others)
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert engine.idle
    assert all(len(t.result()) == len(texts_of(i)) for t, i in zip(others, range(6, 9)))


async def test_a_finished_request_frees_its_id(engine):
    for _ in range(2):  # the same id again once the first call ended
        assert len(await embed(engine, texts_of(2), request_id="reused")) == len(texts_of(2))
    assert engine.idle


async def test_a_fault_outside_the_forward_fails_its_waiters_and_the_engine_serves_on(engine, monkeypatch):
    import engine.embedding.batcher as batcher
    real = batcher._result

    def faulty(row, item):
        raise RuntimeError("a fault after the forward")

    monkeypatch.setattr(batcher, "_result", faulty)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(embed(engine, texts_of(3)), 30)  # answered, never left waiting
    monkeypatch.setattr(batcher, "_result", real)
    assert len(await embed(engine, texts_of(4))) == len(texts_of(4))
    assert engine.idle
