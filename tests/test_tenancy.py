"""Tenants on one generation engine: the prefix cache and request ids never cross
tenants, and each tenant's limits refuse at once (tests.tenancy_harness's engine).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from engine.embedding.engine import EmbeddingEngine
from engine.errors import DuplicateRequestId, InvalidRequest, TenantLimit
from engine.events import FinishReason
from engine.models import ModelSet
from engine.requests import EmbeddingRequest, TokenPrompt
from engine.tenancy import Tenant
from engine.validation import Limits
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.identity import Identity, set_identity
from service.servicer import InferenceServicer
from service.status import to_status
from tests.tenancy_harness import A, B, LONG, NAME, Held, ask, engine, queued_behind, run, tenant_of  # noqa: F401
from tests.test_prefix_cache import LONG_PROMPT


# isolation -----------------------------------------------------------------------
async def test_the_prefix_cache_never_crosses_tenants(engine):
    first = (await run(engine, ask(LONG_PROMPT, tenant=A)))[0]
    other = (await run(engine, ask(LONG_PROMPT, tenant=B)))[0]
    again = (await run(engine, ask(LONG_PROMPT, tenant=A)))[0]
    probe = (await run(engine, ask(LONG_PROMPT + " And then", tenant=Tenant("c"))))[0]
    assert first.cached_tokens == 0 and other.cached_tokens == 0 and probe.cached_tokens == 0
    assert again.cached_tokens > 0


async def test_tenants_with_one_cache_namespace_share(engine):
    x, y = Tenant("x", cache_namespace="shared"), Tenant("y", cache_namespace="shared")
    first = (await run(engine, ask(LONG_PROMPT + " Shared.", tenant=x)))[0]
    second = (await run(engine, ask(LONG_PROMPT + " Shared.", tenant=y)))[0]
    assert first.cached_tokens == 0 and second.cached_tokens > 0


async def test_request_ids_are_scoped_by_tenant(engine):
    models = ModelSet([engine], [])
    a = Held(engine, ask(tenant=A, request_id="same", max_tokens=LONG))
    await a.started()
    b = Held(engine, ask(tenant=B, request_id="same", max_tokens=LONG))  # queued behind a
    await queued_behind(engine, 1)
    with pytest.raises(DuplicateRequestId):  # still refused within one tenant
        await run(engine, ask(tenant=A, request_id="same"))
    assert not models.cancel("same", "c")
    assert models.cancel("same", "b")
    b_events = await b.task
    assert b_events[-1].reason is FinishReason.CANCELLED and not a.task.done()
    assert models.cancel("same", "a")
    a_events = await a.task
    assert a_events[0].request_id == "same" and a_events[-1].reason is FinishReason.CANCELLED


async def test_cancel_through_the_servicer_reaches_only_the_callers_tenant(engine):
    servicer = InferenceServicer(ModelSet([engine], []))
    a = Held(engine, ask(tenant=A, request_id="mine", max_tokens=LONG))
    await a.started()

    async def cancel_as(tenant) -> bool:
        set_identity(Identity(tenant))
        try:
            return (await servicer.Cancel(pb.CancelRequest(request_id="mine"), None)).cancelled
        finally:
            set_identity(Identity())

    assert await cancel_as(B) is False
    assert not a.task.done()
    assert await cancel_as(A) is True
    assert (await a.task)[-1].reason is FinishReason.CANCELLED


async def test_embedding_ids_and_max_in_flight_are_per_tenant(fixture_models):
    embedder = EmbeddingEngine(fixture_models["qwen3"], name="embed-tenanted")
    await embedder.start()
    capped = Tenant("capped", max_in_flight=1)
    try:
        first = embedder.embed(EmbeddingRequest(inputs=("one boat", "two gulls"), request_id="e", tenant=capped))
        await first.__anext__()  # in flight until closed
        with pytest.raises(DuplicateRequestId):
            await embedder.embed(EmbeddingRequest(inputs=("x",), request_id="e", tenant=capped)).__anext__()
        with pytest.raises(TenantLimit) as err:
            await embedder.embed(EmbeddingRequest(inputs=("x",), tenant=capped)).__anext__()
        assert err.value.metadata["limit"] == "max_in_flight"
        other = [r async for r in embedder.embed(EmbeddingRequest(inputs=("x",), request_id="e", tenant=B))]
        assert len(other) == 1 and not embedder.cancel("e", "c")
        with pytest.raises(InvalidRequest) as err:
            await embedder.embed(EmbeddingRequest(inputs=("x",), priority=-101)).__anext__()
        assert err.value.field == "priority"
        await first.aclose()
        assert len([r async for r in embedder.embed(EmbeddingRequest(inputs=("y",), tenant=capped))]) == 1
    finally:
        await embedder.close()


async def test_embeddings_pass_the_same_gate_as_generation(fixture_models):
    """tokens_per_minute charges the tokens an embedding reads; max_queued counts requests
    waiting for a batch slot; both refuse with the gate's TenantLimit, per tenant."""
    from engine.embedding.config import EmbeddingConfig
    embedder = EmbeddingEngine(fixture_models["qwen3"], name="embed-gate", config=EmbeddingConfig(max_active=1))
    await embedder.start()
    metered, queued = Tenant("metered", tokens_per_minute=40), Tenant("queued", max_queued=1)
    try:
        first = [r async for r in embedder.embed(EmbeddingRequest(inputs=("one two three four five",),
                                                                  tenant=metered))]
        used = next(t.tokens_last_minute for t in embedder.tenant_stats() if t.tenant == "metered")
        assert used == first[0][1].tokens > 0  # what it read, charged once
        with pytest.raises(TenantLimit) as err:
            for _ in range(4):  # each reads new text; the window fills
                [r async for r in embedder.embed(EmbeddingRequest(inputs=(f"{_} six seven eight",), tenant=metered))]
        assert err.value.metadata["limit"] == "tokens_per_minute"
        assert [r async for r in embedder.embed(EmbeddingRequest(inputs=("nine",), tenant=B))]  # others unharmed
        holder = embedder.embed(EmbeddingRequest(inputs=("a held slot",), tenant=B))
        await holder.__anext__()  # holds the one batch slot until closed
        waiting = asyncio.ensure_future(embedder.embed(EmbeddingRequest(inputs=("w",), tenant=queued)).__anext__())
        await asyncio.sleep(0.05)
        with pytest.raises(TenantLimit) as err:
            await embedder.embed(EmbeddingRequest(inputs=("v",), tenant=queued)).__anext__()
        assert err.value.metadata["limit"] == "max_queued"
        await holder.aclose()
        assert (await waiting)[1].tokens > 0
        stats = {t.tenant: t for t in embedder.tenant_stats()}
        assert stats["queued"].refused == 1 and stats["metered"].refused == 1
    finally:
        await embedder.close()
