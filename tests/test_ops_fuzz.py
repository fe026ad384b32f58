"""Hostile input against the live session server: random and extreme field values,
unknown fields and raw bytes. Every call must end with a finished event or a status
from an allowed set (never UNKNOWN or INTERNAL), and the server must still answer a
normal request exactly as mlx-lm does afterwards.

Hypothesis drives a blocking gRPC channel on a worker thread while the session's
event loop keeps serving (the test itself awaits the thread).
"""

from __future__ import annotations

import asyncio
import math
import os
import struct

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.helpers import details, generate, request
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS
from tests.rpc_strategies import varint

EXAMPLES = int(os.environ.get("MLXGRPC_FUZZ_EXAMPLES", "150"))
MAX_EVENTS = 48  # a valid long generation is cancelled after this many events
ALLOWED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ALREADY_EXISTS}
SERVICE = "/mlxgrpc.v1.InferenceService/"

# --- strategies -------------------------------------------------------------------

int32 = st.one_of(st.integers(-(2**31), 2**31 - 1),
                  st.sampled_from([0, 1, -1, 2, 639, 640, 4095, 4096, 2**31 - 1, -(2**31)]))
int64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, -1, 4096, 2**31 - 1, 2**31, 2**63 - 1, -(2**63)]))
float32 = st.one_of(st.floats(width=32), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-45, 3.4e38]))
token_id = st.one_of(st.integers(0, 639), int32)
models = st.one_of(st.sampled_from(["", "llama"]),
                   st.sampled_from(["", "llama", "qwen3", "sliding", "minilm", "smollm2", "no-such-model"]),
                   st.text(max_size=40))
small_text = st.text(max_size=64)
# long strings: a random piece repeated up to ~200 KB (tokenizing megabytes on a
# shared CPU takes too long per example; the transport limit is tested separately)
long_text = st.builds(lambda piece, n: (piece or "x") * n, st.text(min_size=1, max_size=8),
                      st.sampled_from([1_000, 20_000, 100_000]))
texts = st.one_of(small_text, long_text, st.sampled_from(["", "\x00", "<|im_start|>", "<|im_end|>", "\ufffd" * 9,
                                                          "{{ raise_exception('x') }}", "{% for %}"]))
stop_lists = st.one_of(st.lists(st.text(max_size=300), max_size=20),
                       st.builds(lambda s, n: [s] * n, st.text(max_size=3), st.sampled_from([16, 17, 2000, 5000])))


@st.composite
def sampling(draw) -> gen_pb.SamplingParams | None:
    if draw(st.booleans()):
        return None
    s = gen_pb.SamplingParams(top_k=draw(int32), min_p=draw(float32), repetition_context_size=draw(int32),
                              presence_penalty=draw(float32), frequency_penalty=draw(float32))
    for name in ("temperature", "top_p", "repetition_penalty"):
        if draw(st.booleans()):
            setattr(s, name, draw(float32))
    if draw(st.booleans()):
        s.seed = draw(st.integers(0, 2**64 - 1))
    for key, value in draw(st.dictionaries(token_id, float32, max_size=8)).items():
        s.logit_bias[key] = value
    if draw(st.integers(0, 20)) == 0:
        for key in range(draw(st.sampled_from([1024, 1025, 5000]))):
            s.logit_bias[key] = 0.5
    return s


@st.composite
def generate_requests(draw) -> pb.GenerateRequest:
    req = pb.GenerateRequest(model=draw(models), request_id=draw(st.one_of(st.just(""), st.text(max_size=200))),
                             session_id=draw(small_text), logprobs=draw(st.booleans()),
                             top_logprobs=draw(int32), bypass_prefix_cache=draw(st.booleans()))
    prompt = draw(st.sampled_from(["text", "tokens", "chat", "none"]))
    if prompt == "text":
        req.text = draw(texts)
    elif prompt == "tokens":
        req.tokens.ids.extend(draw(st.lists(token_id, max_size=64)))
    elif prompt == "chat":
        for role, content in draw(st.lists(st.tuples(st.one_of(st.sampled_from(["user", "assistant", "system"]),
                                                              small_text), texts), max_size=4)):
            req.chat.messages.add(role=role, content=content)
    if (s := draw(sampling())) is not None:
        req.sampling.CopyFrom(s)
    if draw(st.booleans()):
        stopping = gen_pb.StoppingCriteria(min_tokens=draw(int32), stop=draw(stop_lists),
                                           stop_token_ids=draw(st.lists(token_id, max_size=8)),
                                           ignore_eos=draw(st.booleans()))
        if draw(st.booleans()):
            stopping.max_tokens = draw(int32)
        req.stopping.CopyFrom(stopping)
    return req


@st.composite
def plausible_generate_requests(draw) -> pb.GenerateRequest:
    """Valid-looking requests with random values inside the documented ranges, so the
    engine's sampling, stop, logprob and prefix-cache paths run, not only validation."""
    req = pb.GenerateRequest(model=draw(st.sampled_from(["", "llama", "qwen3", "sliding"])),
                             session_id=draw(st.sampled_from(["", "s1", "s2"])),
                             logprobs=draw(st.booleans()), top_logprobs=draw(st.integers(0, 20)),
                             bypass_prefix_cache=draw(st.booleans()))
    if draw(st.booleans()):
        req.text = draw(st.one_of(st.text(min_size=1, max_size=200), st.sampled_from(list(ORACLE_PROMPTS.values()))))
    else:
        req.tokens.ids.extend(draw(st.lists(st.integers(0, 639), min_size=1, max_size=100)))
    s = req.sampling
    if draw(st.booleans()):
        s.temperature = draw(st.floats(0, 3))
        s.top_p = draw(st.floats(0.01, 1))
        s.top_k = draw(st.integers(0, 700))
        s.min_p = draw(st.floats(0, 0.99))
        s.seed = draw(st.integers(0, 2**64 - 1))
    if draw(st.booleans()):
        s.repetition_penalty = draw(st.floats(0.1, 3))
        s.presence_penalty = draw(st.floats(-2, 2))
        s.frequency_penalty = draw(st.floats(-2, 2))
        for key, value in draw(st.dictionaries(st.integers(0, 639), st.floats(-100, 100), max_size=5)).items():
            s.logit_bias[key] = value
    st_max = draw(st.integers(1, 40))
    req.stopping.max_tokens = st_max
    req.stopping.min_tokens = draw(st.integers(0, st_max))
    req.stopping.stop.extend(draw(st.lists(st.text(min_size=1, max_size=6), max_size=4)))
    req.stopping.stop_token_ids.extend(draw(st.lists(st.integers(0, 639), max_size=4)))
    req.stopping.ignore_eos = draw(st.booleans())
    return req


embed_requests = st.builds(
    lambda model, inputs, instruction, normalize, dims, rid: pb.EmbedRequest(
        model=model, inputs=inputs, instruction=instruction, dimensions=dims, request_id=rid,
        **({} if normalize is None else {"normalize": normalize})),
    models, st.one_of(st.lists(texts, max_size=6), st.builds(lambda t, n: [t] * n, small_text,
                                                             st.sampled_from([256, 257, 3000]))),
    small_text, st.one_of(st.none(), st.booleans()), int32, st.text(max_size=200))
tokenize_requests = st.builds(pb.TokenizeRequest, model=models, text=texts, add_special_tokens=st.booleans())
detokenize_requests = st.builds(pb.DetokenizeRequest, model=models, token_ids=st.lists(token_id, max_size=200),
                                skip_special_tokens=st.booleans())
plan_requests = st.builds(pb.PlanMemoryRequest, model=models, context_tokens=int64, max_generation_tokens=int64)
info_requests = st.builds(pb.GetModelInfoRequest, model=models)
cancel_requests = st.builds(pb.CancelRequest, request_id=st.text(max_size=300))


@st.composite
def raw_payloads(draw) -> tuple[str, bytes]:
    """(method, bytes): random bytes, or a valid message with unknown fields appended
    (unknown field numbers, wrong wire types for known fields, absurd enum-like varints)."""
    method = draw(st.sampled_from(["Generate", "Embed", "Tokenize", "Detokenize", "PlanMemory",
                                   "GetModelInfo", "Cancel", "ListModels"]))
    if draw(st.booleans()):
        return method, draw(st.binary(max_size=512))
    base = draw({"Generate": generate_requests(), "Embed": embed_requests, "Tokenize": tokenize_requests,
                 "Detokenize": detokenize_requests, "PlanMemory": plan_requests, "GetModelInfo": info_requests,
                 "Cancel": cancel_requests, "ListModels": st.just(pb.ListModelsRequest())}[method])
    extra = b""
    for number, value in draw(st.lists(st.tuples(st.integers(1, 2**29 - 1), st.integers(0, 2**64 - 1)),
                                       max_size=4)):
        extra += varint(number << 3) + varint(value)  # varint fields: unknown or mistyped
    if draw(st.booleans()):
        extra += varint((9999 << 3) | 1) + struct.pack("<d", math.nan)  # fixed64 NaN in an unknown field
    return method, base.SerializeToString() + extra


calls = st.one_of(
    st.tuples(st.just("Generate"), generate_requests()),
    st.tuples(st.just("Generate"), plausible_generate_requests()),
    st.tuples(st.just("Embed"), embed_requests),
    st.tuples(st.just("Tokenize"), tokenize_requests),
    st.tuples(st.just("Detokenize"), detokenize_requests),
    st.tuples(st.just("PlanMemory"), plan_requests),
    st.tuples(st.just("GetModelInfo"), info_requests),
    st.tuples(st.just("Cancel"), cancel_requests),
    st.tuples(st.just("raw"), raw_payloads()),
)

# --- calling ----------------------------------------------------------------------

STREAMING = {"Generate", "Embed"}


def _call(channel: grpc.Channel, method: str, payload) -> str:
    """Makes one call; returns how it ended ("finished", "cancelled-by-us", "ok" or a
    status name). Raises AssertionError on a forbidden outcome."""
    if method == "raw":
        method, payload = payload
        serialize = lambda b: b  # noqa: E731 - the bytes as they are
    else:
        serialize = lambda m: m.SerializeToString()  # noqa: E731
    path = SERVICE + method
    try:
        if method in STREAMING:
            stream = channel.unary_stream(path, request_serializer=serialize,
                                          response_deserializer=_RESPONSES[method].FromString)(payload, timeout=300)
            events = 0
            for msg in stream:
                events += 1
                if method == "Generate" and msg.WhichOneof("event") == "finished":
                    assert msg.finished.reason != gen_pb.FINISH_REASON_ERROR
                    return "finished"
                if events >= MAX_EVENTS:
                    stream.cancel()
                    return "cancelled-by-us"
            return "ok"  # Embed ends after its responses; Generate must not get here
        channel.unary_unary(path, request_serializer=serialize,
                            response_deserializer=_RESPONSES[method].FromString)(payload, timeout=300)
        return "ok"
    except grpc.RpcError as err:
        code = err.code()
        if code == grpc.StatusCode.CANCELLED and "Locally cancelled" in (err.details() or ""):
            return "cancelled-by-us"
        assert code in ALLOWED, f"{method} ended with {code}: {err.details()}"
        return code.name


_RESPONSES = {"Generate": pb.GenerateResponse, "Embed": pb.EmbedResponse, "Tokenize": pb.TokenizeResponse,
              "Detokenize": pb.DetokenizeResponse, "PlanMemory": pb.PlanMemoryResponse,
              "GetModelInfo": pb.GetModelInfoResponse, "Cancel": pb.CancelResponse,
              "ListModels": pb.ListModelsResponse}


def _run_fuzz(address: str, outcomes: dict[str, int]) -> None:
    with grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck))
        @given(calls)
        def fuzz(case):
            method, payload = case
            outcome = _call(channel, method, payload)
            if method == "Generate" and outcome == "ok":
                raise AssertionError("a Generate stream ended without its finished event")
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

        fuzz()


async def _normal_request_still_correct(stub, oracle) -> None:
    for name in ("short", "long"):
        out = await generate(stub, request(ORACLE_PROMPTS[name], max_tokens=ORACLE_TOKENS[name]))
        assert out.token_ids == oracle["llama"][name]


# --- tests ------------------------------------------------------------------------


async def test_fuzzed_requests_never_break_the_server(server, stub, oracle):
    outcomes: dict[str, int] = {}
    await asyncio.to_thread(_run_fuzz, server["address"], outcomes)
    print(f"fuzz outcomes over {sum(outcomes.values())} calls: {dict(sorted(outcomes.items()))}")
    assert sum(outcomes.values()) >= EXAMPLES
    await _normal_request_still_correct(stub, oracle)
    # no engine kept a row or a lease of the fuzzing
    for engine in server["models"].generation:
        for _ in range(200):
            if engine.active == 0 and engine.queued == 0:
                break
            await asyncio.sleep(0.05)
        assert (engine.active, engine.queued) == (0, 0), engine.name


async def test_invalid_utf8_is_invalid_argument(channel, stub, oracle):
    bad_text = b"\x22\x03\xff\xfe\xfd"  # field 4 (text): 3 bytes that are not UTF-8
    generate_raw = channel.unary_stream(SERVICE + "Generate", request_serializer=lambda b: b,
                                        response_deserializer=pb.GenerateResponse.FromString)
    tokenize_raw = channel.unary_unary(SERVICE + "Tokenize", request_serializer=lambda b: b,
                                       response_deserializer=pb.TokenizeResponse.FromString)
    for call in (lambda: _drain(generate_raw(bad_text)), lambda: tokenize_raw(b"\x12\x02\xc3\x28")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        found = details(err.value)
        assert found["ErrorInfo"].reason == "MALFORMED_REQUEST"
        assert found["BadRequest"].field_violations[0].field == "request"
        assert "UTF-8" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:  # truncated: a length past the end
        await tokenize_raw(b"\x12\x7fabc")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await _normal_request_still_correct(stub, oracle)


async def _drain(call) -> None:
    async for _ in call:
        pass


async def test_message_over_the_size_limit_is_resource_exhausted(stub, oracle):
    huge = "x" * (16 * 1024 * 1024 + 16)  # the server's default limit is 16 MiB
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Tokenize(pb.TokenizeRequest(model="llama", text=huge))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await _normal_request_still_correct(stub, oracle)
