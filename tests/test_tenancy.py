"""Tenants on one generation engine: the prefix cache and request ids never cross
tenants, each tenant's limits refuse at once, work counts from arrival, a busy
compile pool is overload, and each tenant's figures reach GetLoad and the metrics.

One engine of the llama fixture with one running slot and four queued (so a long
request holds the engine while others wait) and one compile thread.
"""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from engine.embedding.engine import EmbeddingEngine
from engine.errors import CompilerBusy, DuplicateRequestId, InvalidRequest, QueueFull, TenantLimit
from engine.events import Finished, FinishReason, Started
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.engine import GenerationEngine
from engine.generation.grammar.formats import GrammarLimits
from engine.models import ModelSet
from engine.requests import (ChatMessage, ChatPrompt, EmbeddingRequest, FormatKind, GenerationRequest, ResponseFormat, StopOptions,
                             TextPrompt, TokenPrompt)
from engine.tenancy import Tenant
from engine.validation import Limits
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.identity import Identity, set_identity
from service.load_metrics import LoadCollector
from service.metrics import scrape
from service.servicer import InferenceServicer
from service.status import to_status
from tests.test_prefix_cache import LONG_PROMPT

NAME = "tenanted"
A, B = Tenant("a"), Tenant("b")
COMPILE_TIMEOUT_S = 0.5
LONG = 3000  # tokens: far more than any test waits for


@pytest_asyncio.fixture(scope="module")
async def engine(fixture_models):
    config = GenerationConfig(
        limits=Limits(max_prompt_tokens=256),
        grammar=GrammarLimits(compile_threads=1, compile_timeout_s=COMPILE_TIMEOUT_S),
        scheduler=SchedulerConfig(max_active=1, max_queued=4, prefill_chunk=8, tick_tokens=24,
                                  min_prefill_tokens=4))
    engine = GenerationEngine(str(fixture_models["llama"]), name=NAME, config=config)
    await engine.start()
    yield engine
    await engine.close()


def ask(prompt="Hello there", *, tenant=A, max_tokens=4, request_id="", **kw) -> GenerationRequest:
    prompt = TextPrompt(prompt) if isinstance(prompt, str) else prompt
    return GenerationRequest(prompt=prompt, request_id=request_id, tenant=tenant,
                             stopping=StopOptions(max_tokens=max_tokens, ignore_eos=True), **kw)


async def run(engine, request) -> list:
    return [event async for event in engine.generate(request)]


class Held:
    """A request consumed in the background, first event awaited."""

    def __init__(self, engine, request):
        self.events: list = []
        self.first = asyncio.Event()
        self.task = asyncio.ensure_future(self._consume(engine, request))

    async def _consume(self, engine, request):
        async for event in engine.generate(request):
            self.events.append(event)
            self.first.set()
        return self.events

    async def started(self):
        await asyncio.wait_for(self.first.wait(), 30)
        assert isinstance(self.events[0], Started)


async def queued_behind(engine, count: int):
    """Waits until ``count`` requests wait in the engine's queue."""
    for _ in range(600):
        if engine.queued >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the requests never queued")


def tenant_of(engine, name):
    return {t.tenant: t for t in engine.tenant_stats()}[name]


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
    from service import convert

    assert convert.generation_request(pb.GenerateRequest(text="x", priority=7), B).priority == 7
    assert convert.embedding_request(pb.EmbedRequest(inputs=["x"], priority=-3), B).tenant == B


# work counted from arrival -------------------------------------------------------
def json_object(tenant) -> GenerationRequest:
    return ask(tenant=tenant, response_format=ResponseFormat(FormatKind.JSON_OBJECT))


async def outcome(engine, request) -> str:
    try:
        await run(engine, request)
        return "ran"
    except QueueFull as exc:  # CompilerBusy included
        return exc.reason
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__


async def test_requests_count_from_arrival_and_a_busy_compile_pool_is_overload(engine):
    """With the one compile thread held, eight formats arrive: the five that fit
    max_active + max_queued open at once and wait; three are refused at once; the
    five then find no free compile thread (overload, not a bad format)."""
    gate = threading.Event()
    engine._grammars._pool.submit(gate.wait)  # holds the compile thread
    try:
        outcomes = await asyncio.gather(*(outcome(engine, json_object(Tenant(f"t{i}"))) for i in range(8)))
    finally:
        gate.set()
    assert sorted(outcomes) == ["COMPILER_BUSY"] * 5 + ["QUEUE_FULL"] * 3
    busy = CompilerBusy("busy")
    status = to_status(busy)
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (await outcome(engine, json_object(A))) == "ran"  # the pool serves again


async def test_format_limits_are_checked_before_the_prompt_is_tokenized(engine, monkeypatch):
    tokenized = []
    encode = engine.encode_prompt
    monkeypatch.setattr(engine, "encode_prompt", lambda r: tokenized.append(r) or encode(r))
    huge = ResponseFormat(FormatKind.REGEX, text="a" * (engine._grammars.limits.max_bytes + 1))
    with pytest.raises(InvalidRequest) as err:
        await run(engine, ask(response_format=huge))
    assert err.value.field == "response_format.regex" and tokenized == []


async def test_a_chat_over_the_prompt_limit_is_rendered_once(engine, monkeypatch):
    rendered = []
    template = engine._prompts._template
    monkeypatch.setattr(engine._prompts, "_template", lambda *a: rendered.append(a) or template(*a))
    long_chat = ChatPrompt((ChatMessage("user", "word " * 200), ChatMessage("assistant", "word " * 200),
                            ChatMessage("user", "and?")))
    with pytest.raises(InvalidRequest) as err:
        await run(engine, ask(long_chat))
    assert err.value.field == "chat.messages" and len(rendered) == 1
    rendered.clear()
    events = await run(engine, ask(ChatPrompt((ChatMessage("user", "hi"), ChatMessage("assistant", "yo"),
                                               ChatMessage("user", "and?")))))
    assert isinstance(events[-1], Finished) and len(rendered) == 2  # within the limit: its history too


# figures -------------------------------------------------------------------------
async def test_get_load_shows_a_caller_its_own_tenant_and_an_admin_every_tenant(engine):
    await run(engine, ask(tenant=A, max_tokens=3))
    servicer = InferenceServicer(ModelSet([engine], []))

    async def load_as(identity: Identity) -> pb.ModelLoad:
        set_identity(identity)
        try:
            return (await servicer.GetLoad(pb.GetLoadRequest(model=NAME), None)).models[0]
        finally:
            set_identity(Identity())

    own = await load_as(Identity(A))
    assert [t.tenant for t in own.tenants] == ["a"]
    assert own.tenants[0].generated_tokens >= 3 and own.tenants[0].in_flight_requests == 0
    everyone = await load_as(Identity(A, admin=True))
    names = {t.tenant for t in everyone.tenants}
    assert {"a", "b", "capped", "metered"} <= names
    assert {t.tenant: t for t in everyone.tenants}["capped"].refused_requests == 1
    assert [t.tenant for t in (await load_as(Identity())).tenants] == []  # anonymous sent nothing here


async def test_tenant_metrics_name_only_configured_tenants(engine):
    registry = CollectorRegistry()
    registry.register(LoadCollector(ModelSet([engine], []), tenants=("configured",)))
    text = await asyncio.to_thread(scrape, registry)
    assert f'mlxgrpc_tenant_in_flight_requests{{model="{NAME}",tenant="configured"}} 0.0' in text
    generated = tenant_of(engine, "metered").generated_tokens
    assert f'mlxgrpc_tenant_generated_tokens_total{{model="{NAME}",tenant="metered"}} {float(generated)}' in text
    assert f'mlxgrpc_tenant_refused_requests_total{{model="{NAME}",tenant="capped"}} 1.0' in text
