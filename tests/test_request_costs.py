"""What a request may cost before it is refused, on a live server with two tenants and every
contract: repeated fields counted on the wire bytes before protobuf builds them (and on the
message before conversion) on each of the three services, JSON text nested too deep refused by
name (the MLX contract carries none), and every RPC that tokenizes counted against its tenant's max_in_flight."""

from __future__ import annotations

import asyncio

import grpc
import pytest
import pytest_asyncio
from smg_grpc_proto import vllm_engine_pb2 as vllm_pb
from smg_grpc_proto import vllm_engine_pb2_grpc as vllm_grpc

from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.models import ModelSet
from service.bearer_tokens import load_table
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.server import ServerOptions, create_server
from service.wire_budget import SCAN_FROM
from tests.helpers import details, generate, request

TOKENS = """\
tok-acme    acme    inference
tok-beta    beta    inference  max_in_flight=1
"""
LONG = 3000  # tokens: far more than a test waits for; such a request ends by Cancel
DEEP = 20_000  # levels of JSON nesting: under the 64 KiB JSON limit, past Python's recursion limit


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


ACME, BETA = bearer("tok-acme"), bearer("tok-beta")


@pytest_asyncio.fixture(scope="module")
async def channel(fixture_models, tmp_path_factory):
    config = GenerationConfig(scheduler=SchedulerConfig(max_active=4, max_queued=8, prefill_chunk=16))
    models = ModelSet([GenerationEngine(str(fixture_models["llama"]), name="llama", config=config)], [])
    await models.start()
    path = tmp_path_factory.mktemp("tokens") / "tokens"
    path.write_text(TOKENS)
    srv, port = await create_server("127.0.0.1:0", models, options=ServerOptions(auth_table=load_table(path, {})))
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            yield ch
    finally:
        await srv.stop(0.5)
        await models.close()


@pytest.fixture
def stub(channel):
    return pb_grpc.InferenceServiceStub(channel)


def refused_field(err: grpc.aio.AioRpcError) -> str:
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    return details(err)["BadRequest"].field_violations[0].field


def chat(**kw) -> pb.GenerateRequest:
    messages = kw.pop("messages", None) or [gen_pb.ChatMessage(role="user", content="Hello")]
    return pb.GenerateRequest(model="llama", chat=gen_pb.ChatMessages(messages=messages, **kw),
                              stopping=gen_pb.StoppingCriteria(max_tokens=2))


async def refused(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value


# --- counted before parsing or conversion -------------------------------------------------


async def test_a_hundred_thousand_tools_are_refused_naming_chat_tools(stub):
    req = chat(tools=[gen_pb.Tool()] * 100_000)
    assert req.ByteSize() > SCAN_FROM  # walked on its wire bytes, never parsed
    err = await refused(generate(stub, req, metadata=ACME))
    assert refused_field(err) == "chat.tools"
    assert "at most 256" in err.details()


async def test_tools_over_the_cap_in_a_small_request_are_refused_before_conversion(stub):
    req = chat(tools=[gen_pb.Tool(name="t")] * 300)
    assert req.ByteSize() < SCAN_FROM  # parsed, then counted before anything is converted
    assert refused_field(await refused(generate(stub, req, metadata=ACME))) == "chat.tools"


@pytest.mark.parametrize("size", [300, 100_000])
async def test_parts_and_tool_calls_are_capped_per_message(stub, size):
    parts = [gen_pb.ChatMessage(role="user", content="Hi"),
             gen_pb.ChatMessage(role="user", parts=[gen_pb.ContentPart(text="x")] * size)]
    assert refused_field(await refused(generate(stub, chat(messages=parts), metadata=ACME))) \
        == "chat.messages[1].parts"
    calls = [gen_pb.ChatMessage(role="assistant", tool_calls=[gen_pb.ToolCall(name="f")] * size)]
    assert refused_field(await refused(generate(stub, chat(messages=calls), metadata=ACME))) \
        == "chat.messages[0].tool_calls"


async def test_map_entries_are_counted_on_the_wire_where_parsing_would_fold_them(stub, channel):
    """70,000 logit_bias entries of one key parse into one entry: only the wire shows their cost."""
    req = request("Hello", max_tokens=2)
    req.sampling.logit_bias[0] = 0.0
    entry = req.sampling.SerializeToString()
    wire = request("Hello", max_tokens=2).SerializeToString() + _field(pb.GenerateRequest, "sampling",
                                                                       entry * 70_000)
    generate_raw = channel.unary_stream("/mlxgrpc.v1.InferenceService/Generate")
    err = await refused(_drain(generate_raw(wire, metadata=ACME)))
    assert refused_field(err) == "sampling.logit_bias"
    sp = vllm_pb.SamplingParams(max_tokens=2)
    sp.logit_bias[0] = 0.0
    vllm_wire = vllm_pb.GenerateRequest(request_id="r", text="Hello").SerializeToString() + _field(
        vllm_pb.GenerateRequest, "sampling_params", sp.SerializeToString() * 70_000)
    for method in ("/vllm.grpc.engine.VllmEngine/Generate", "/mlx.grpc.engine.MlxEngine/Generate"):
        err = await refused(_drain(channel.unary_stream(method)(vllm_wire, metadata=ACME)))
        assert refused_field(err) == "sampling_params.logit_bias"


async def test_a_request_over_its_field_budget_is_refused_naming_where_it_ran_out(stub):
    req = chat(messages=[gen_pb.ChatMessage()] * 70_000)
    err = await refused(generate(stub, req, metadata=ACME))
    assert refused_field(err) == "chat.messages"
    assert details(err)["ErrorInfo"].reason == "REQUEST_TOO_COMPLEX" and "at most 32768 fields" in err.details()


def _field(message_type, name: str, payload: bytes) -> bytes:
    """One length-delimited field of ``message_type`` on the wire."""
    number = message_type.DESCRIPTOR.fields_by_name[name].number
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


async def _drain(call) -> None:
    async for _ in call:
        pass


async def test_large_requests_are_parsed_after_their_walk_and_reach_their_handler(stub):
    """Over SCAN_FROM and within every cap: walked, parsed, then checked by the servicer as usual."""
    text = "word " * (SCAN_FROM // 4)
    ids = (await stub.Tokenize(pb.TokenizeRequest(model="llama", text=text), metadata=ACME)).token_ids
    assert len(ids) > 1000
    assert refused_field(await refused(generate(stub, request(text * 40), metadata=ACME))) == "text"


# --- JSON text: bytes first, then a depth limit ------------------------------------------


def deep_json(levels: int = DEEP) -> str:
    return "[" * levels + "]" * levels


async def test_deep_template_kwargs_are_invalid_not_internal(stub):
    err = await refused(generate(stub, chat(template_kwargs={"x": deep_json()}), metadata=ACME))
    assert refused_field(err) == "chat.template_kwargs[x]"
    assert "nests deeper" in err.details()
    err = await refused(generate(stub, chat(template_kwargs={"x": "1" * (70 << 10)}), metadata=ACME))
    assert refused_field(err) == "chat.template_kwargs"


async def test_deep_vllm_schemas_and_structural_tags_are_invalid_not_internal(channel):
    worker = vllm_grpc.VllmEngineStub(channel)
    deep_tag = '{"format": ' * DEEP + "{}" + "}" * DEEP
    for field, sp in (("sampling_params.json_schema", vllm_pb.SamplingParams(json_schema=deep_json())),
                      ("sampling_params.structural_tag", vllm_pb.SamplingParams(structural_tag=deep_tag))):
        sp.max_tokens = 2
        call = worker.Generate(vllm_pb.GenerateRequest(request_id="deep", text="Hello", sampling_params=sp),
                               metadata=ACME)
        err = await refused(_drain(call))
        assert refused_field(err) == field


# --- every RPC that tokenizes counts against its tenant ----------------------------------


async def until_in_flight(stub, token) -> None:
    for _ in range(1000):
        load = await stub.GetLoad(pb.GetLoadRequest(model="llama"), metadata=token)
        if any(t.in_flight_requests for t in load.models[0].tenants):
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the request never got in flight")


async def test_tokenizing_rpcs_count_against_the_tenants_max_in_flight(stub):
    long = request("Keep counting the boats", max_tokens=LONG, request_id="beta-long")
    long.stopping.ignore_eos = True
    held = asyncio.create_task(generate(stub, long, metadata=BETA))
    try:
        await until_in_flight(stub, BETA)
        calls = {
            "Tokenize": stub.Tokenize(pb.TokenizeRequest(model="llama", text="Hello"), metadata=BETA),
            "Detokenize": stub.Detokenize(pb.DetokenizeRequest(model="llama", token_ids=[1, 2]), metadata=BETA),
            "Prefetch": stub.Prefetch(pb.PrefetchRequest(model="llama", text="Hello"), metadata=BETA),
        }
        for name, call in calls.items():
            err = await refused(call)
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, name
            info = details(err)
            assert info["ErrorInfo"].reason == "TENANT_LIMIT" and "RetryInfo" in info, name
        # the other tenant is served meanwhile, tokenizing and generating
        assert (await stub.Tokenize(pb.TokenizeRequest(model="llama", text="Hello"), metadata=ACME)).token_ids
        out = await generate(stub, request("Hello", max_tokens=2), metadata=ACME)
        assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH
    finally:
        await stub.Cancel(pb.CancelRequest(request_id="beta-long"), metadata=BETA)
        await held
    # the held request gone, the tenant tokenizes again
    assert (await stub.Tokenize(pb.TokenizeRequest(model="llama", text="Hello"), metadata=BETA)).token_ids


# --- the walk itself -----------------------------------------------------------------------


def test_large_requests_within_their_caps_pass_the_walk():
    """Images, long texts, many messages and long token prompts: over SCAN_FROM, within every cap."""
    from engine.validation import Limits
    from service.wire_budget import budget_for

    image = gen_pb.ContentPart(image=gen_pb.Image(data=b"\x89PNG" + b"\x00" * (2 << 20), media_type="image/png"))
    messages = [gen_pb.ChatMessage(role="user", content="word " * 20) for _ in range(5000)]
    messages.append(gen_pb.ChatMessage(role="user", parts=[gen_pb.ContentPart(text="look"), image]))
    tools = [gen_pb.Tool(name=f"t{i}", parameters_json_schema='{"type": "object"}') for i in range(200)]
    req = pb.GenerateRequest(model="llama", chat=gen_pb.ChatMessages(messages=messages, tools=tools,
                                                                      template_kwargs={"a": "1"}))
    req.sampling.logit_bias.update({i: 1.0 for i in range(1024)})
    req.stopping.stop_token_ids.extend(range(100_000, 101_024))
    budget = budget_for("/mlxgrpc.v1.InferenceService/Generate", Limits())
    assert req.ByteSize() > SCAN_FROM and budget.check(req.SerializeToString()) is None
    ids = pb.GenerateRequest(model="llama", tokens=gen_pb.TokenIds(ids=list(range(200_000))))
    assert budget.check(ids.SerializeToString()) is None
    req.stopping.stop_token_ids.append(7)  # one over its cap, packed
    assert budget.check(req.SerializeToString()).field == "stopping.stop_token_ids"


def test_the_walk_counts_unknown_fields_and_bounds_packed_numbers():
    from engine.validation import Limits
    from service.wire_budget import budget_for

    budget = budget_for("/mlxgrpc.v1.InferenceService/Tokenize", Limits(max_request_fields=1000))
    assert budget.check(b"\xfa\x3e\x00" * 1001).field == "request"  # field 999, empty, repeated
    ids = budget_for("/mlxgrpc.v1.InferenceService/Generate", Limits(max_request_numbers=1000))
    too_many = pb.GenerateRequest(tokens=gen_pb.TokenIds(ids=[300] * 1001)).SerializeToString()
    assert ids.check(too_many).field == "tokens.ids"
    assert ids.check(pb.GenerateRequest(tokens=gen_pb.TokenIds(ids=[300] * 1000)).SerializeToString()) is None
    assert ids.check(b"\x0a\xff\xff") is None  # not protobuf: left to the parser
