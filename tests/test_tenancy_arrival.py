"""Work counts from arrival: requests are refused at once before tokenizing, a busy
compile pool is overload, formats and chats are checked before costly work; and each
tenant's figures reach GetLoad and the metrics (tests.tenancy_harness's engine).
"""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from prometheus_client import CollectorRegistry

from engine.errors import CompilerBusy, InvalidRequest, QueueFull, TenantLimit
from engine.events import Finished
from engine.models import ModelSet
from engine.requests import ChatMessage, ChatPrompt, FormatKind, GenerationRequest, ResponseFormat
from engine.tenancy import Tenant
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.identity import Identity, set_identity
from service.load_metrics import LoadCollector
from service.metrics import scrape
from service.servicer import InferenceServicer
from service.status import to_status
from tests.tenancy_harness import A, B, LONG, NAME, Held, ask, engine, run, tenant_of  # noqa: F401


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
    engine.served.grammars._pool.submit(gate.wait)  # holds the compile thread
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
    monkeypatch.setattr(engine, "encode_prompt", lambda r, tools=None: tokenized.append(r) or encode(r, tools))
    huge = ResponseFormat(FormatKind.REGEX, text="a" * (engine.served.grammars.limits.max_bytes + 1))
    with pytest.raises(InvalidRequest) as err:
        await run(engine, ask(response_format=huge))
    assert err.value.field == "response_format.regex" and tokenized == []


async def test_a_chat_over_the_prompt_limit_is_rendered_once(engine, monkeypatch):
    rendered = []
    template = engine.served.prompts._template
    monkeypatch.setattr(engine.served.prompts, "_template", lambda *a: rendered.append(a) or template(*a))
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
async def load_as(servicer, identity: Identity) -> pb.ModelLoad:
    set_identity(identity)
    try:
        return (await servicer.GetLoad(pb.GetLoadRequest(model=NAME), None)).models[0]
    finally:
        set_identity(Identity())


async def refused_once(engine, tenant: Tenant) -> None:
    held = Held(engine, ask(tenant=tenant, max_tokens=LONG, request_id="held"))
    await held.started()
    with pytest.raises(TenantLimit):
        await run(engine, ask(tenant=tenant))
    assert engine.cancel("held", tenant.name)
    await held.task


async def test_get_load_shows_a_caller_its_own_tenant_and_an_admin_every_tenant(engine):
    await run(engine, ask(tenant=A, max_tokens=3))
    await run(engine, ask(tenant=B, max_tokens=2))
    await refused_once(engine, Tenant("capped", max_in_flight=1))
    servicer = InferenceServicer(ModelSet([engine], []))
    own = await load_as(servicer, Identity(A))
    assert [t.tenant for t in own.tenants] == ["a"]
    assert own.tenants[0].generated_tokens >= 3 and own.tenants[0].in_flight_requests == 0
    everyone = {t.tenant: t for t in (await load_as(servicer, Identity(A, "admin"))).tenants}
    assert {"a", "b", "capped"} <= everyone.keys()
    assert everyone["capped"].refused_requests == 1 and everyone["a"].refused_requests == 0
    assert everyone["b"].tokens_last_minute >= 2
    assert [t.tenant for t in (await load_as(servicer, Identity())).tenants] == []  # anonymous sent nothing


async def test_tenant_metrics_name_only_configured_tenants(engine):
    await run(engine, ask(tenant=Tenant("metered"), max_tokens=5))
    await refused_once(engine, Tenant("refused", max_in_flight=1))
    registry = CollectorRegistry()
    registry.register(LoadCollector(ModelSet([engine], []), tenants=("configured",)))
    text = await asyncio.to_thread(scrape, registry)
    assert f'mlxgrpc_tenant_in_flight_requests{{model="{NAME}",tenant="configured"}} 0.0' in text
    generated = tenant_of(engine, "metered").generated_tokens
    assert f'mlxgrpc_tenant_generated_tokens_total{{model="{NAME}",tenant="metered"}} {float(generated)}' in text
    assert f'mlxgrpc_tenant_refused_requests_total{{model="{NAME}",tenant="refused"}} 1.0' in text
