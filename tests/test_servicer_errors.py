"""Every servicer method's error paths, without a network: grpc_testing's server in
front of the servicer over the session's real models. Each bad field ends with its
status code, ErrorInfo reason and BadRequest field; the live-server tests
(test_service_errors.py) check the same statuses over the wire."""

from __future__ import annotations

import grpc
import pytest

from engine.generation.core.scheduling.scheduler import SchedulerConfig
from engine.generation.frontend.engine import GenerationConfig, GenerationEngine
from engine.models import ModelSet
from engine.validation import BYTES_PER_TOKEN, Limits
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.servicer import InferenceServicer
from tests.conftest import DECODER_EMBEDDER
from tests.servicer_harness import ServicerHarness

CONTEXT = 4096  # the fixture models' context length
PROMPT_BYTES = (CONTEXT - 1) * BYTES_PER_TOKEN
LONG_ID = "i" * 129
INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND


@pytest.fixture(scope="module")
def harness(server):
    return ServicerHarness(InferenceServicer(server["models"]))


def gen(**kw) -> pb.GenerateRequest:
    kw.setdefault("model", "llama")
    if not {"text", "tokens", "chat"} & kw.keys():
        kw["text"] = "Hello there"
    kw.setdefault("stopping", gen_pb.StoppingCriteria(max_tokens=4))
    return pb.GenerateRequest(**kw)


def chat(count: int, content: str = "hi") -> gen_pb.ChatMessages:
    return gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", content=content)] * count)


GENERATE = [
    ("model", gen(model="m" * 129)),
    ("request_id", gen(request_id=LONG_ID)),
    ("session_id", gen(session_id="s" * 129)),
    ("prompt", pb.GenerateRequest(model="llama")),
    ("text", gen(text="x" * (PROMPT_BYTES + 1))),
    ("text", gen(text="é" * (PROMPT_BYTES // 2 + 1))),  # bytes count, not characters
    ("chat.messages", gen(chat=chat(CONTEXT))),
    ("chat.messages", gen(chat=chat(2, "y" * (PROMPT_BYTES // 2)))),
    ("chat.messages", gen(chat=chat(0))),
    ("tokens.ids", gen(tokens=gen_pb.TokenIds(ids=[5] * CONTEXT))),
    ("tokens.ids", gen(tokens=gen_pb.TokenIds(ids=[1, 2, 640]))),
    ("stopping.stop", gen(stopping=gen_pb.StoppingCriteria(max_tokens=4, stop=["a"] * 17))),
    ("stopping.stop", gen(stopping=gen_pb.StoppingCriteria(max_tokens=4, stop=["a" * 257]))),
    ("stopping.stop_token_ids", gen(stopping=gen_pb.StoppingCriteria(max_tokens=4, stop_token_ids=[1] * 1025))),
    ("stopping.stop_token_ids", gen(stopping=gen_pb.StoppingCriteria(max_tokens=4, stop_token_ids=[-3]))),
    ("stopping.max_tokens", gen(stopping=gen_pb.StoppingCriteria(max_tokens=0))),
    ("stopping.max_tokens", gen(stopping=gen_pb.StoppingCriteria(max_tokens=4097))),
    ("stopping.max_tokens", gen(stopping=gen_pb.StoppingCriteria(max_tokens=4096))),  # beyond the context
    ("stopping.min_tokens", gen(stopping=gen_pb.StoppingCriteria(max_tokens=4, min_tokens=9))),
    ("stopping.min_tokens", gen(stopping=gen_pb.StoppingCriteria(min_tokens=2**31 - 1))),
    ("stopping.min_tokens", gen(stopping=gen_pb.StoppingCriteria(min_tokens=CONTEXT))),
    ("stopping.min_tokens", gen(stopping=gen_pb.StoppingCriteria(min_tokens=-1))),
    ("sampling.logit_bias", gen(sampling=gen_pb.SamplingParams(logit_bias={i: 1.0 for i in range(1025)}))),
    ("sampling.logit_bias", gen(sampling=gen_pb.SamplingParams(logit_bias={100000: 1.0}))),
    ("sampling.temperature", gen(sampling=gen_pb.SamplingParams(temperature=float("nan")))),
    ("sampling.top_p", gen(sampling=gen_pb.SamplingParams(top_p=1.5))),
    ("sampling.top_k", gen(sampling=gen_pb.SamplingParams(top_k=-1))),
    ("sampling.min_p", gen(sampling=gen_pb.SamplingParams(min_p=1.0))),
    ("sampling.repetition_penalty", gen(sampling=gen_pb.SamplingParams(repetition_penalty=0))),
    ("top_logprobs", gen(top_logprobs=21)),
    ("adapter", gen(adapter="a" * 129)),
    ("adapter", gen(adapter="not a name")),
]


@pytest.mark.parametrize("field,request_", GENERATE, ids=[f"{f}-{i}" for i, (f, _) in enumerate(GENERATE)])
async def test_generate_bad_field(harness, field, request_):
    out = await harness.call_stream("Generate", request_)
    assert (out.code, out.reason, out.violations) == (INVALID, "INVALID_FIELD", [field]), out.message
    assert out.details["ErrorInfo"].domain == "mlxgrpc.v1"
    assert field in out.message and len(out.message) <= 1024
    assert not out.responses  # refused before the stream started


async def test_generate_limits_are_inclusive(harness):
    """Exactly at each limit is accepted (the request then fails on what it is: a
    prompt of too many tokens, which only tokenizing can tell)."""
    for request_ in (gen(text="x" * PROMPT_BYTES), gen(chat=chat(CONTEXT - 1)),
                     gen(stopping=gen_pb.StoppingCriteria(max_tokens=4, stop=["a" * 256] * 16))):
        out = await harness.call_stream("Generate", request_)
        assert out.code is grpc.StatusCode.OK or out.violations in (["text"], ["chat.messages"]), out.message
        if out.code is not grpc.StatusCode.OK:
            assert "tokens; the limit is" in out.message


async def test_generate_states_of_the_model(harness):
    out = await harness.call_stream("Generate", gen(model="no-such-model"))
    assert (out.code, out.reason, out.details["ErrorInfo"].metadata["model"]) == (NOT_FOUND, "MODEL_NOT_FOUND",
                                                                                  "no-such-model")
    out = await harness.call_stream("Generate", gen(model=DECODER_EMBEDDER))
    assert (out.code, out.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "UNSUPPORTED_OPERATION")
    out = await harness.call_stream("Generate", gen(adapter="not-loaded"))
    assert (out.code, out.reason, out.details["ErrorInfo"].metadata["adapter"]) == (NOT_FOUND, "ADAPTER_NOT_FOUND",
                                                                                    "not-loaded")
    assert not out.responses  # refused before the stream started
    out = await harness.call_stream("Generate", gen(stopping=gen_pb.StoppingCriteria(max_tokens=3)))
    assert out.code is grpc.StatusCode.OK
    assert [r.WhichOneof("event") for r in out.responses][::len(out.responses) - 1] == ["started", "finished"]


EMBED = [
    ("inputs", pb.EmbedRequest(model=DECODER_EMBEDDER)),
    ("inputs", pb.EmbedRequest(model=DECODER_EMBEDDER, inputs=["a"] * 257)),
    ("inputs[1]", pb.EmbedRequest(model=DECODER_EMBEDDER, inputs=["a", "b" * (CONTEXT * BYTES_PER_TOKEN + 1)])),
    ("instruction", pb.EmbedRequest(model=DECODER_EMBEDDER, inputs=["a"],
                                    instruction="q" * (CONTEXT * BYTES_PER_TOKEN + 1))),
    ("dimensions", pb.EmbedRequest(model=DECODER_EMBEDDER, inputs=["a"], dimensions=-1)),
    ("request_id", pb.EmbedRequest(model=DECODER_EMBEDDER, inputs=["a"], request_id=LONG_ID)),
    ("model", pb.EmbedRequest(model="m" * 129, inputs=["a"])),
]


@pytest.mark.parametrize("field,request_", EMBED, ids=[f"{f}-{i}" for i, (f, _) in enumerate(EMBED)])
async def test_embed_bad_field(harness, field, request_):
    out = await harness.call_stream("Embed", request_)
    assert (out.code, out.reason, out.violations) == (INVALID, "INVALID_FIELD", [field]), out.message


async def test_embed_states_of_the_model(harness):
    out = await harness.call_stream("Embed", pb.EmbedRequest(model="llama", inputs=["a"]))
    assert out.code is grpc.StatusCode.FAILED_PRECONDITION and "pooled embedding" in out.message
    out = await harness.call_stream("Embed", pb.EmbedRequest(model="nope", inputs=["a"]))
    assert (out.code, out.reason) == (NOT_FOUND, "MODEL_NOT_FOUND")
    out = await harness.call_stream("Embed", pb.EmbedRequest(model=DECODER_EMBEDDER, inputs=["a", "b"]))
    assert out.code is grpc.StatusCode.OK and sorted(r.index for r in out.responses) == [0, 1]


UNARY = [
    ("Cancel", pb.CancelRequest(), INVALID, "request_id"),
    ("Cancel", pb.CancelRequest(request_id=LONG_ID), INVALID, "request_id"),
    ("GetModelInfo", pb.GetModelInfoRequest(model="nope"), NOT_FOUND, ""),
    ("GetModelInfo", pb.GetModelInfoRequest(model="m" * 129), INVALID, "model"),
    ("PlanMemory", pb.PlanMemoryRequest(model="llama", context_tokens=-1), INVALID, "context_tokens"),
    ("PlanMemory", pb.PlanMemoryRequest(model="llama", context_tokens=2**31), INVALID, "context_tokens"),
    ("PlanMemory", pb.PlanMemoryRequest(model="llama", context_tokens=100, max_generation_tokens=101),
     INVALID, "max_generation_tokens"),
    ("PlanMemory", pb.PlanMemoryRequest(model=DECODER_EMBEDDER), grpc.StatusCode.FAILED_PRECONDITION, ""),
    ("PlanMemory", pb.PlanMemoryRequest(model="nope"), NOT_FOUND, ""),
    ("Tokenize", pb.TokenizeRequest(model="llama", text="x" * (PROMPT_BYTES + 1)), INVALID, "text"),
    ("Tokenize", pb.TokenizeRequest(model="m" * 129), INVALID, "model"),
    ("Tokenize", pb.TokenizeRequest(model="nope"), NOT_FOUND, ""),
    ("Detokenize", pb.DetokenizeRequest(model="llama", token_ids=[5, 99999]), INVALID, "token_ids"),
    ("Detokenize", pb.DetokenizeRequest(model="llama", token_ids=[5] * (CONTEXT + 1)), INVALID, "token_ids"),
    ("Detokenize", pb.DetokenizeRequest(model="nope"), NOT_FOUND, ""),
    ("GetLoad", pb.GetLoadRequest(model="m" * 129), INVALID, "model"),
    ("GetLoad", pb.GetLoadRequest(model="nope"), NOT_FOUND, ""),
    ("LoadAdapter", pb.LoadAdapterRequest(model="m" * 129, name="x", path="/x"), INVALID, "model"),
    ("LoadAdapter", pb.LoadAdapterRequest(model="llama", name="n" * 129, path="/x"), INVALID, "name"),
    ("LoadAdapter", pb.LoadAdapterRequest(model="llama", name="not a name", path="/x"), INVALID, "name"),
    ("LoadAdapter", pb.LoadAdapterRequest(model="llama", name="x"), INVALID, "path"),
    ("LoadAdapter", pb.LoadAdapterRequest(model="llama", name="x", path="/" + "p" * 4096), INVALID, "path"),
    ("LoadAdapter", pb.LoadAdapterRequest(model="llama", name="x", path="/nonexistent/adapter"), INVALID, "path"),
    ("LoadAdapter", pb.LoadAdapterRequest(model="nope", name="x", path="/x"), NOT_FOUND, ""),
    ("LoadAdapter", pb.LoadAdapterRequest(model=DECODER_EMBEDDER, name="x", path="/x"),
     grpc.StatusCode.FAILED_PRECONDITION, ""),
    ("UnloadAdapter", pb.UnloadAdapterRequest(model="llama", name=""), INVALID, "name"),
    ("UnloadAdapter", pb.UnloadAdapterRequest(model="llama", name="absent"), NOT_FOUND, ""),
    ("UnloadAdapter", pb.UnloadAdapterRequest(model="nope", name="x"), NOT_FOUND, ""),
    ("ListAdapters", pb.ListAdaptersRequest(model="m" * 129), INVALID, "model"),
    ("ListAdapters", pb.ListAdaptersRequest(model="nope"), NOT_FOUND, ""),
]


@pytest.mark.parametrize("method,request_,code,field", UNARY,
                         ids=[f"{m}-{f or c.name}-{i}" for i, (m, _, c, f) in enumerate(UNARY)])
async def test_unary_error(harness, method, request_, code, field):
    out = await harness.call(method, request_)
    assert (out.code, out.violations) == (code, [field] if field else []), out.message
    assert out.details["ErrorInfo"].domain == "mlxgrpc.v1" and not out.responses


async def test_unary_successes(harness):
    assert (await harness.call("Cancel", pb.CancelRequest(request_id="not-running"))).responses[0].cancelled is False
    assert (await harness.call("Tokenize", pb.TokenizeRequest(model="llama", text="x" * 100))).code.name == "OK"
    names = [m.name for m in (await harness.call("ListModels", pb.ListModelsRequest())).responses[0].models]
    assert "llama" in names
    loads = (await harness.call("GetLoad", pb.GetLoadRequest(model="llama"))).responses[0].models
    assert [load.model for load in loads] == ["llama"]
    adapters = (await harness.call("ListAdapters", pb.ListAdaptersRequest(model="llama"))).responses[0]
    assert adapters.model == "llama" and adapters.max_adapters > 0


async def test_a_reply_over_the_message_limit_is_resource_exhausted(server):
    small = ServicerHarness(InferenceServicer(server["models"], max_message_bytes=2000))
    out = await small.call("Tokenize", pb.TokenizeRequest(model="llama", text="a b c d " * 200))
    assert (out.code, out.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESPONSE_TOO_LARGE")
    assert "RetryInfo" not in out.details and int(out.details["ErrorInfo"].metadata["size_bytes"]) > 2000
    out = await small.call("Detokenize", pb.DetokenizeRequest(model="llama", token_ids=[300] * 3000))
    assert (out.code, out.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESPONSE_TOO_LARGE")
    assert (await small.call("Tokenize", pb.TokenizeRequest(model="llama", text="short"))).code.name == "OK"


async def test_identifier_limit_is_configurable(server):
    loose = ServicerHarness(InferenceServicer(server["models"], Limits(max_request_id_length=200)))
    out = await loose.call("Cancel", pb.CancelRequest(request_id=LONG_ID))
    assert out.code is grpc.StatusCode.OK


async def test_a_model_still_loading_is_unavailable_with_retry(fixture_models):
    loading = ModelSet([GenerationEngine(str(fixture_models["llama"]), name="later")], [])  # never started
    harness = ServicerHarness(InferenceServicer(loading))
    for out in (await harness.call_stream("Generate", gen(model="later")),
                await harness.call("Tokenize", pb.TokenizeRequest(model="later", text="hi")),
                await harness.call("PlanMemory", pb.PlanMemoryRequest())):
        assert (out.code, out.reason) == (grpc.StatusCode.UNAVAILABLE, "NOT_READY"), out.message
        assert out.details["RetryInfo"].retry_delay.ToMilliseconds() > 0


async def test_a_request_that_can_never_fit_is_out_of_range(fixture_models):
    config = GenerationConfig(memory_limit_bytes=1, memory_reserve_bytes=0,
                              scheduler=SchedulerConfig(prefix_cache_bytes=0))
    tight = GenerationEngine(str(fixture_models["llama"]), name="tight", config=config)
    await tight.start()
    try:
        out = await ServicerHarness(InferenceServicer(ModelSet([tight], []))).call_stream("Generate", gen(model=""))
    finally:
        await tight.close()
    assert (out.code, out.reason) == (grpc.StatusCode.OUT_OF_RANGE, "DOES_NOT_FIT"), out.message
    assert {"context_tokens", "max_safe_context", "usable_bytes"} <= out.details["ErrorInfo"].metadata.keys()


async def test_counts_are_checked_before_the_request_is_converted(harness, monkeypatch):
    """Millions of tiny repeated elements fit in one message: they are counted on the
    wire message, never turned into engine objects first."""
    def unreachable(_msg):
        raise AssertionError("converted before its counts were checked")

    monkeypatch.setattr("service.convert.generation_request", unreachable)
    monkeypatch.setattr("service.pooling_convert.embedding_request", unreachable)
    for request_, field in ((gen(chat=chat(300_000)), "chat.messages"),
                            (gen(stopping=gen_pb.StoppingCriteria(stop=[""] * 300_000)), "stopping.stop"),
                            (gen(tokens=gen_pb.TokenIds(ids=[1] * 300_000)), "tokens.ids")):
        out = await harness.call_stream("Generate", request_)
        assert (out.code, out.violations) == (INVALID, [field]), out.message
    out = await harness.call_stream("Embed", pb.EmbedRequest(model=DECODER_EMBEDDER, inputs=[""] * 300_000))
    assert (out.code, out.violations) == (INVALID, ["inputs"]), out.message


def test_every_rpc_maps_its_errors_in_one_place():
    from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
    from smg_grpc_proto import vllm_engine_pb2 as vllm_pb

    from service.worker.servicer import WorkerServicer
    from service.worker.vllm import VllmWorkerServicer

    for servicer, service in ((InferenceServicer, pb.DESCRIPTOR.services_by_name["InferenceService"]),
                              (WorkerServicer, mlx_pb.DESCRIPTOR.services_by_name["MlxEngine"]),
                              (VllmWorkerServicer, vllm_pb.DESCRIPTOR.services_by_name["VllmEngine"])):
        unmapped = [m.name for m in service.methods if not getattr(getattr(servicer, m.name), "maps_errors", False)]
        assert unmapped == [], f"{service.full_name} methods without @mapped: {unmapped}"
