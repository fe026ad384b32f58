"""n choices on one Generate: one prompt prefill shared by n sequences, choice i of a seeded
request sampled as a solo request seeded seed + i, each choice's events tagged with its index,
a cancel ending them all, and memory admitted for all n or none. Engine-level here; the wire
(choice_index, INVALID_ARGUMENT for n, a real server's stubs) further down."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import grpc
import mlx_lm
import pytest
import pytest_asyncio

from engine.errors import DoesNotFit, InvalidRequest, TenantLimit
from engine.events import Delta, Finished, FinishReason, PromptLogprobs, Started
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.generation.frontend.refusals import check_queue_room
from engine.memory.budget import MemoryBudget
from engine.memory.facts import facts_from_model
from engine.requests import (
    ChatMessage,
    ChatPrompt,
    FormatKind,
    GenerationRequest,
    ResponseFormat,
    SamplingOptions,
    StopOptions,
    TextPrompt,
    TokenPrompt,
    Tool,
    ToolChoiceMode,
)
from engine.tenancy import Tenant
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.status import to_status
from tests.helpers import details, request

PROMPT = "The quick brown fox jumps over the lazy dog."
HOT = SamplingOptions(temperature=4.0, seed=1234)  # flat enough that choices differ on the fixtures
LONG = 3000


@pytest_asyncio.fixture(scope="module")
async def engine(fixture_models):
    """The llama fixture with the prefix cache off, small chunks so prefill takes several forwards."""
    config = GenerationConfig(scheduler=SchedulerConfig(max_active=16, prefill_chunk=8, tick_tokens=32,
                                                        min_prefill_tokens=4, prefix_cache_bytes=0))
    engine = GenerationEngine(str(fixture_models["llama"]), name="choices", config=config)
    await engine.start()
    yield engine
    await engine.close()


def ask(n: int = 1, *, sampling: SamplingOptions = HOT, max_tokens: int = 12, **kw) -> GenerationRequest:
    return GenerationRequest(prompt=TextPrompt(PROMPT), sampling=sampling, stopping=StopOptions(max_tokens=max_tokens),
                             n=n, **kw)


async def events_of(engine, req) -> list:
    return [event async for event in engine.generate(req)]


def by_choice(events: list, n: int) -> list[list[int]]:
    tokens: list[list[int]] = [[] for _ in range(n)]
    for event in events:
        if isinstance(event, Delta):
            tokens[event.choice].extend(event.token_ids)
    return tokens


def check_shape(events: list, n: int) -> None:
    """One Started first; every choice's Deltas before its one Finished; the last event a Finished."""
    assert isinstance(events[0], Started) and not any(isinstance(e, Started) for e in events[1:])
    ended: set[int] = set()
    for event in events[1:]:
        assert 0 <= event.choice < n
        assert event.choice not in ended, "an event after its choice's Finished"
        if isinstance(event, Finished):
            ended.add(event.choice)
    assert ended == set(range(n)) and isinstance(events[-1], Finished)


async def settled(engine, timeout: float = 10.0):
    """Nothing waiting, running, reserved or held, nothing tracked."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        s = await engine.stats()
        if (s.waiting, s.running, s.reserved, s.reserved_bytes, s.rows, s.kv_bytes, s.tracked, s.in_flight) == (
                0, 0, 0, 0, 0, 0, 0, 0) and all(t.in_flight == t.running == t.waiting == 0 for t in s.tenants):
            return s
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"engine did not settle: {s}")
        await asyncio.sleep(0.02)


async def test_seeded_choice_i_is_a_solo_request_seeded_seed_plus_i(engine):
    events = await events_of(engine, ask(4))
    check_shape(events, 4)
    together = by_choice(events, 4)
    alone = []
    for i in range(4):
        solo = await events_of(engine, ask(1, sampling=dataclasses.replace(HOT, seed=HOT.seed + i)))
        alone.append(by_choice(solo, 1)[0])
    assert together == alone
    assert all(len(t) == 12 for t in together)
    assert len({tuple(t) for t in together}) > 1, "seeded choices drew the same tokens"
    finished = [e for e in events if isinstance(e, Finished)]
    assert sorted(e.choice for e in finished) == [0, 1, 2, 3]
    assert all(e.reason is FinishReason.LENGTH and e.usage.completion_tokens == 12 for e in finished)
    await settled(engine)


async def test_unseeded_choices_draw_apart_and_greedy_ones_agree(engine):
    hot = await events_of(engine, ask(4, sampling=SamplingOptions(temperature=4.0)))
    assert len({tuple(t) for t in by_choice(hot, 4)}) > 1
    greedy = await events_of(engine, ask(3, sampling=SamplingOptions(temperature=0.0)))
    check_shape(greedy, 3)
    tokens = by_choice(greedy, 3)
    solo = by_choice(await events_of(engine, ask(1, sampling=SamplingOptions(temperature=0.0))), 1)[0]
    assert tokens == [solo] * 3  # n greedy choices: n identical answers


async def test_choices_of_one_token_end_at_the_fork(engine):
    events = await events_of(engine, ask(4, max_tokens=1))
    check_shape(events, 4)
    alone = [by_choice(await events_of(engine, ask(1, max_tokens=1, sampling=dataclasses.replace(
        HOT, seed=HOT.seed + i))), 1)[0] for i in range(4)]
    assert by_choice(events, 4) == alone and all(len(t) == 1 for t in alone)
    await settled(engine)


async def test_eight_choices_share_one_prompt_prefill(engine):
    before = (await engine.stats()).prompt_tokens_computed
    solo = await events_of(engine, ask(1))
    prompt_tokens = solo[0].prompt_tokens
    one = (await engine.stats()).prompt_tokens_computed - before
    assert one == prompt_tokens - 1  # the last prompt token is the first decode step's
    events = await events_of(engine, ask(8, bypass_prefix_cache=True))
    check_shape(events, 8)
    assert (await engine.stats()).prompt_tokens_computed - before == 2 * one
    finished = [e for e in events if isinstance(e, Finished)]
    assert all(e.usage.prompt_tokens == prompt_tokens for e in finished)
    await settled(engine)


async def test_cancel_ends_every_choice_and_frees_their_memory(engine):
    req = ask(4, max_tokens=LONG, request_id="cancel-choices")
    events: list = []

    async def consume():
        async for event in engine.generate(req):
            events.append(event)

    task = asyncio.create_task(consume())
    while len({e.choice for e in events if isinstance(e, Delta)}) < 4:
        await asyncio.sleep(0.005)
    running = await engine.stats()
    assert running.running == 4 and running.reserved == 4 and running.rows == 4
    assert engine.cancel("cancel-choices")
    await asyncio.wait_for(task, 30)
    finished = [e for e in events if isinstance(e, Finished)]
    assert sorted(e.choice for e in finished) == [0, 1, 2, 3]
    assert all(e.reason is FinishReason.CANCELLED for e in finished)
    await settled(engine)


async def test_a_consumer_leaving_early_ends_every_choice(engine):
    async for event in engine.generate(ask(3, max_tokens=LONG)):
        if isinstance(event, Delta):
            break
    await settled(engine)


async def test_cancel_before_the_prefill_ends_every_choice(engine):
    blocker = asyncio.create_task(events_of(engine, ask(16, max_tokens=200)))  # every row taken
    while (await engine.stats()).running < 16:
        await asyncio.sleep(0.005)
    waiting = asyncio.create_task(events_of(engine, ask(3, request_id="waits")))
    while (await engine.stats()).waiting < 1:
        await asyncio.sleep(0.005)
    assert engine.cancel("waits")
    events = await waiting
    assert [(type(e), e.choice, e.reason) for e in events] == [(Finished, i, FinishReason.CANCELLED) for i in range(3)]
    check_shape([Started("", "", 0, 0), *events], 3)
    await blocker
    await settled(engine)


@pytest.mark.parametrize("n", [0, -1, 17])
async def test_n_outside_1_to_max_choices_is_invalid(engine, n):
    with pytest.raises(InvalidRequest) as err:
        await events_of(engine, ask(n))
    assert err.value.field == "n"


async def test_max_choices_is_the_servers(fixture_models):
    from engine.validation import Limits

    config = GenerationConfig(limits=Limits(max_choices=2), scheduler=SchedulerConfig(prefix_cache_bytes=0))
    small = GenerationEngine(str(fixture_models["llama"]), name="two", config=config)
    await small.start()
    try:
        assert len(by_choice(await events_of(small, ask(2, max_tokens=3)), 2)) == 2
        with pytest.raises(InvalidRequest, match="between 1 and 2"):
            await events_of(small, ask(3, max_tokens=3))
    finally:
        await small.close()


async def test_each_choice_keeps_its_own_response_format(engine):
    fmt = ResponseFormat(FormatKind.CHOICE, options=("red", "green", "blue", "yellow"))
    events = await events_of(engine, ask(4, max_tokens=10, response_format=fmt,
                                         sampling=SamplingOptions(temperature=4.0, seed=7)))
    check_shape(events, 4)
    texts = [""] * 4
    for event in events:
        if isinstance(event, Delta):
            texts[event.choice] += event.text
    assert all(text in fmt.options for text in texts), texts
    assert all(e.reason is FinishReason.STOP for e in events if isinstance(e, Finished))


async def test_each_choice_makes_its_own_tool_call(chat_models):
    tools = (Tool("get_weather", "Weather", json.dumps({"type": "object", "properties": {"city": {
        "type": "string", "maxLength": 10}}, "required": ["city"]})),)
    chat = ChatPrompt((ChatMessage("user", "Weather in Oslo?"),), tools=tools, tool_choice=ToolChoiceMode.REQUIRED,
                      parallel_tool_calls=False, enable_thinking=False)
    qwen = GenerationEngine(str(chat_models["qwen"]), name="qwen")
    await qwen.start()
    try:
        events = await events_of(qwen, GenerationRequest(chat, sampling=SamplingOptions(temperature=1.0, seed=3),
                                                         stopping=StopOptions(max_tokens=60), n=3))
    finally:
        await qwen.close()
    check_shape(events, 3)
    calls: list[list] = [[] for _ in range(3)]
    for event in events:
        if isinstance(event, Delta):
            calls[event.choice] += event.tool_calls
    assert [[c.name for c in mine] for mine in calls] == [["get_weather"]] * 3
    assert all(e.reason is FinishReason.TOOL_CALLS for e in events if isinstance(e, Finished))


async def test_prompt_logprobs_come_once_for_every_choice(engine):
    events = await events_of(engine, ask(3, max_tokens=4, prompt_logprobs=1))
    assert isinstance(events[0], Started) and isinstance(events[1], PromptLogprobs)
    assert sum(isinstance(e, PromptLogprobs) for e in events) == 1
    assert len(events[1].tokens) == events[0].prompt_tokens - 1
    check_shape([e for e in events if not isinstance(e, PromptLogprobs)], 3)


async def test_a_tenant_counts_every_choice(engine):
    tenant = Tenant("two", max_in_flight=3)
    with pytest.raises(InvalidRequest) as err:  # more choices than the tenant may ever hold: not "retry later"
        await events_of(engine, ask(4, tenant=tenant))
    assert err.value.field == "n" and "max_in_flight of 3" in err.value.message
    with pytest.raises(InvalidRequest, match="max_queued of 2"):
        await events_of(engine, ask(3, tenant=Tenant("queue", max_queued=2)))
    with pytest.raises(InvalidRequest, match="admits at once"):  # beyond --max-active + --max-queued
        check_queue_room(0, SchedulerConfig(max_active=2, max_queued=1), "m", 4)
    busy = [asyncio.create_task(events_of(engine, ask(2, tenant=tenant, max_tokens=40)))]
    while not [t for t in (await engine.stats()).tenants if t.tenant == "two" and t.in_flight]:
        await asyncio.sleep(0.01)
    with pytest.raises(TenantLimit):  # fits the limit alone, not beside the running two: retry later
        await events_of(engine, ask(2, tenant=tenant))
    await asyncio.gather(*busy)
    events = await events_of(engine, ask(3, tenant=tenant, max_tokens=4))
    check_shape(events, 3)
    (ledger,) = [t for t in (await settled(engine)).tenants if t.tenant == "two"]
    assert ledger.generated_tokens == 2 * 40 + 3 * 4 and ledger.in_flight == 0


# Memory: the n sequences each hold their own KV, and are admitted together or not at all.

CHUNK = 8


@pytest.fixture(scope="module")
def tight_limit(fixture_models) -> int:
    """Usable bytes that fit one 600-token sequence beside the weights, not two."""
    model, _ = mlx_lm.load(str(fixture_models["llama"]))
    facts = facts_from_model(model, json.loads((fixture_models["llama"] / "config.json").read_text()))
    probe = MemoryBudget(facts, usable=1 << 40, reserve_bytes=0, prefill_chunk=CHUNK)
    return facts.weights_bytes + (probe.cost([600]) + probe.cost([600, 600])) // 2


@pytest_asyncio.fixture
async def tight_engine(fixture_models, tight_limit):
    config = GenerationConfig(memory_limit_bytes=tight_limit, memory_reserve_bytes=0,
                              scheduler=SchedulerConfig(prefill_chunk=CHUNK, prefix_cache_bytes=0))
    engine = GenerationEngine(str(fixture_models["llama"]), name="tight", config=config)
    await engine.start()
    yield engine
    await engine.close()


def tokens(n: int, max_tokens: int) -> GenerationRequest:
    return GenerationRequest(prompt=TokenPrompt(tuple(range(10, 20))), stopping=StopOptions(max_tokens=max_tokens),
                             n=n)


async def test_choices_that_never_fit_together_are_refused(tight_engine):
    assert len(by_choice(await events_of(tight_engine, tokens(1, 590)), 1)[0]) == 590  # one fits
    with pytest.raises(DoesNotFit) as err:
        await events_of(tight_engine, tokens(2, 590))
    assert "2 choices" in err.value.message
    assert to_status(err.value).code == grpc.StatusCode.OUT_OF_RANGE


async def test_choices_wait_for_memory_for_all_of_them(tight_engine):
    first_events: list = []

    async def first():
        async for event in tight_engine.generate(tokens(1, 580)):
            first_events.append(event)

    running = asyncio.create_task(first())
    while not first_events:
        await asyncio.sleep(0.005)
    second = asyncio.create_task(events_of(tight_engine, tokens(2, 100)))  # 2 x 110 beside 590: too much now
    for _ in range(2000):
        stats = await tight_engine.stats()
        if stats.waiting == 1:
            break
        assert not running.done(), "the first finished before the choices were queued"
        await asyncio.sleep(0.005)
    assert (stats.running, stats.reserved, stats.rows) == (1, 1, 1)  # nothing reserved for the choices yet
    await running
    events = await second
    check_shape(events, 2)
    assert by_choice(events, 2) == [by_choice(events, 2)[0]] * 2 and len(by_choice(events, 2)[0]) == 100
    await settled(tight_engine)


# Through the wire: a real server, its generated stubs.


@pytest_asyncio.fixture(scope="module")
async def stub(fixture_models):
    from engine.models import ModelSet
    from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
    from service.server import create_server

    config = GenerationConfig(scheduler=SchedulerConfig(max_active=8, prefill_chunk=8, tick_tokens=32))
    models = ModelSet([GenerationEngine(str(fixture_models["llama"]), name="llama", config=config)], [])
    srv, port = await create_server("127.0.0.1:0", models)
    await srv.start()
    await models.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield pb_grpc.InferenceServiceStub(channel), models.generator("llama")
    await srv.stop(0.5)
    await models.close()


async def read_all(call) -> list[pb.GenerateResponse]:
    return [msg async for msg in call]


def wire_choices(messages: list[pb.GenerateResponse], n: int) -> list[tuple[list[int], pb.GenerationFinished]]:
    """Per choice: its tokens and its finished event, checking the stream's order on the way."""
    assert messages[0].WhichOneof("event") == "started"
    assert all(m.WhichOneof("event") != "started" for m in messages[1:])
    tokens: list[list[int]] = [[] for _ in range(n)]
    finished: dict[int, pb.GenerationFinished] = {}
    for m in messages[1:]:
        i = m.choice_index
        assert 0 <= i < n and i not in finished, "an event after its choice finished"
        if m.WhichOneof("event") == "delta":
            tokens[i].extend(m.delta.token_ids)
        else:
            finished[i] = m.finished
    assert sorted(finished) == list(range(n)) and messages[-1].WhichOneof("event") == "finished"
    return [(tokens[i], finished[i]) for i in range(n)]


async def test_choices_stream_tagged_with_their_index(stub):
    stub, _ = stub
    sampling = gen_pb.SamplingParams(temperature=4.0, seed=99)
    messages = await read_all(stub.Generate(request(PROMPT, n=4, max_tokens=10, sampling=sampling, logprobs=True,
                                                    top_logprobs=2)))
    choices = wire_choices(messages, 4)
    assert all(len(t) == 10 and f.reason == gen_pb.FINISH_REASON_LENGTH for t, f in choices)
    assert all(len(m.delta.logprobs) == len(m.delta.token_ids) for m in messages if m.WhichOneof("event") == "delta")
    for i in (0, 3):  # choice i is the solo request seeded 99 + i
        solo = await read_all(stub.Generate(request(PROMPT, max_tokens=10, sampling=gen_pb.SamplingParams(
            temperature=4.0, seed=99 + i))))
        assert wire_choices(solo, 1)[0][0] == choices[i][0]


@pytest.mark.parametrize("n", [-1, 17, 1000])
async def test_n_out_of_range_is_invalid_argument(stub, n):
    stub, _ = stub
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await read_all(stub.Generate(request(PROMPT, n=n)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details(err.value)["BadRequest"].field_violations] == ["n"]


async def test_n_zero_means_one(stub):
    stub, _ = stub
    assert len(wire_choices(await read_all(stub.Generate(request(PROMPT, n=0, max_tokens=3))), 1)) == 1


async def test_cancel_rpc_ends_every_choice(stub):
    stub, engine = stub
    call = stub.Generate(request(PROMPT, n=3, max_tokens=LONG, request_id="wire-cancel",
                                 sampling=gen_pb.SamplingParams(temperature=1.0)))
    messages = [await call.read()]
    while messages[-1].WhichOneof("event") != "delta":
        messages.append(await call.read())
    assert (await stub.Cancel(pb.CancelRequest(request_id="wire-cancel"))).cancelled
    while (msg := await call.read()) is not grpc.aio.EOF:
        messages.append(msg)
    choices = wire_choices(messages, 3)
    assert {f.reason for _, f in choices} == {gen_pb.FINISH_REASON_CANCELLED}
    await settled(engine)
