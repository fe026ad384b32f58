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


async def test_the_servicer_runs_generate_as_the_callers_tenant(engine):
    from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb

    servicer = InferenceServicer(ModelSet([engine], []))
    set_identity(Identity(Tenant("served")))
    try:
        request = pb.GenerateRequest(model=NAME, text="Hi", stopping=gen_pb.StoppingCriteria(max_tokens=2,
                                                                                             ignore_eos=True))
        replies = [reply async for reply in servicer.Generate(request, None)]
    finally:
        set_identity(Identity())
    assert replies[-1].finished.usage.completion_tokens == 2
    assert tenant_of(engine, "served").generated_tokens == 2


# limits --------------------------------------------------------------------------
async def test_max_in_flight_refuses_at_once_and_spares_other_tenants(engine):
    capped = Tenant("capped", max_in_flight=1)
    held = Held(engine, ask(tenant=capped, max_tokens=LONG, request_id="held"))
    await held.started()
    with pytest.raises(TenantLimit) as err:
        await run(engine, ask(tenant=capped))
    assert err.value.metadata["tenant"] == "capped" and err.value.metadata["limit"] == "max_in_flight"
    status = to_status(err.value)
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "'capped'" in status.details
    other = Held(engine, ask(tenant=B))  # waits its turn
    await queued_behind(engine, 1)
    assert engine.cancel("held", "capped")
    assert (await other.task)[-1].reason is FinishReason.LENGTH
    await held.task
    assert tenant_of(engine, "capped").refused == 1


async def test_max_queued_counts_requests_not_started(engine):
    queued = Tenant("queued", max_queued=1)
    busy = Held(engine, ask(tenant=B, max_tokens=LONG, request_id="busy"))
    await busy.started()
    waiting = Held(engine, ask(tenant=queued))
    await queued_behind(engine, 1)
    with pytest.raises(TenantLimit) as err:
        await run(engine, ask(tenant=queued))
    assert err.value.metadata["limit"] == "max_queued"
    assert engine.cancel("busy", "b")
    await asyncio.gather(busy.task, waiting.task)


async def test_tokens_per_minute_counts_prompt_and_generated_tokens(engine):
    metered = Tenant("metered", tokens_per_minute=20)
    prompt = TokenPrompt(tuple(range(10, 20)))
    done = await run(engine, ask(prompt, tenant=metered, max_tokens=5))
    assert done[-1].usage.completion_tokens == 5
    stats = tenant_of(engine, "metered")
    assert (stats.tokens_last_minute, stats.generated_tokens, stats.in_flight) == (15, 5, 0)
    with pytest.raises(TenantLimit) as err:  # 15 used + a 10-token prompt > 20
        await run(engine, ask(prompt, tenant=metered))
    assert err.value.metadata["limit"] == "tokens_per_minute"
    assert 0 < err.value.retry_after_s <= 60
    assert to_status(err.value).code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert tenant_of(engine, "metered").refused == 1


async def test_priority_is_validated():
    from engine.validation import validate_request

    with pytest.raises(InvalidRequest) as err:
        validate_request(ask(priority=101), 640, Limits(), 4096)
    assert err.value.field == "priority"
    validate_request(ask(priority=-100), 640, Limits(), 4096)
    from service import convert, pooling_convert

    assert convert.generation_request(pb.GenerateRequest(text="x", priority=7), B).priority == 7
    assert pooling_convert.embedding_request(pb.EmbedRequest(inputs=["x"], priority=-3), B).tenant == B
