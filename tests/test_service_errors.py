"""Bad input gets the right status code and google.rpc details, naming the field."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.conftest import HAS_MINILM
from tests.helpers import details, generate, request

INVALID = [
    ("sampling.temperature", dict(sampling=gen_pb.SamplingParams(temperature=-1))),
    ("sampling.temperature", dict(sampling=gen_pb.SamplingParams(temperature=float("nan")))),
    ("sampling.top_p", dict(sampling=gen_pb.SamplingParams(top_p=0))),
    ("sampling.top_p", dict(sampling=gen_pb.SamplingParams(top_p=1.5))),
    ("sampling.top_k", dict(sampling=gen_pb.SamplingParams(top_k=-1))),
    ("sampling.min_p", dict(sampling=gen_pb.SamplingParams(min_p=1.0))),
    ("sampling.repetition_penalty", dict(sampling=gen_pb.SamplingParams(repetition_penalty=0))),
    ("sampling.logit_bias", dict(sampling=gen_pb.SamplingParams(logit_bias={100000: 1.0}))),
    ("stopping.stop_token_ids", dict(stopping=gen_pb.StoppingCriteria(max_tokens=4, stop_token_ids=[-3]))),
    ("stopping.max_tokens", dict(stopping=gen_pb.StoppingCriteria(max_tokens=0))),
    ("stopping.max_tokens", dict(stopping=gen_pb.StoppingCriteria(max_tokens=4096))),  # prompt + 4096 > context
    ("stopping.min_tokens", dict(stopping=gen_pb.StoppingCriteria(max_tokens=4, min_tokens=9))),
    ("stopping.min_tokens", dict(stopping=gen_pb.StoppingCriteria(min_tokens=2**31 - 1))),  # max_tokens unset
    ("stopping.stop", dict(stopping=gen_pb.StoppingCriteria(max_tokens=4, stop=["x"] * 17))),
    ("sampling.logit_bias", dict(sampling=gen_pb.SamplingParams(logit_bias={i: 0.5 for i in range(1025)}))),
    ("top_logprobs", dict(top_logprobs=21)),
    ("request_id", dict(request_id="x" * 129)),
    ("session_id", dict(session_id="x" * 129)),
]


@pytest.mark.parametrize("field,kwargs", INVALID, ids=[f"{f}-{i}" for i, (f, _) in enumerate(INVALID)])
async def test_invalid_field_is_invalid_argument_with_bad_request(stub, field, kwargs):
    req = request("Hello there, my friend", **kwargs)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()
    found = details(err.value)
    assert found["ErrorInfo"].reason == "INVALID_FIELD"
    assert found["ErrorInfo"].domain == "mlxgrpc.v1"
    assert [v.field for v in found["BadRequest"].field_violations] == [field]


async def test_prompts_are_refused_by_size_before_any_work(stub):
    """Text and chats past the byte and message limits (sized to the 4096-token
    context) are refused for their size, not tokenized and then refused for tokens."""
    too_long = request("x" * (4095 * 32 + 1))
    many = pb.GenerateRequest(model="llama", chat=gen_pb.ChatMessages(
        messages=[gen_pb.ChatMessage(role="user", content="hi")] * 5_000))  # more: refused on the wire
    for req, field, description in ((too_long, "text", "at most 131040 bytes"),
                                    (many, "chat.messages", "at most 4095 messages")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await generate(stub, req)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        violation = details(err.value)["BadRequest"].field_violations[0]
        assert violation.field == field and violation.description.startswith(description)


async def test_a_request_that_can_never_fit_is_out_of_range_everywhere():
    """The contract, the docs and the code name one status for a request that can
    never fit in memory: OUT_OF_RANGE (AIP-193: a value beyond what the server holds)."""
    from engine.errors import DoesNotFit
    from service.status import code_for

    root = Path(__file__).resolve().parents[1]
    proto = (root / "protos/mlxgrpc/v1/inference_service.proto").read_text()
    readme = (root / "README.md").read_text()
    assert "can never fit in memory OUT_OF_RANGE" in " ".join(proto.replace("//", " ").split())
    assert re.search(r"can never fit in memory[^|\n]*\| OUT_OF_RANGE \|", readme)
    assert "FAILED_PRECONDITION" not in next(line for line in proto.splitlines() if "never fit" in line)
    assert code_for(DoesNotFit("x")) == grpc.StatusCode.OUT_OF_RANGE


async def test_token_prompt_outside_vocabulary(stub):
    req = pb.GenerateRequest(model="llama", tokens=gen_pb.TokenIds(ids=[1, 2, 640]))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["BadRequest"].field_violations[0].field == "tokens.ids"


async def test_missing_prompt(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, pb.GenerateRequest(model="llama"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(err.value)["BadRequest"].field_violations[0].field == "prompt"


async def test_unknown_model_is_not_found(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request("Hello", model="no-such-model"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert details(err.value)["ErrorInfo"].reason == "MODEL_NOT_FOUND"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetModelInfo(pb.GetModelInfoRequest(model="no-such-model"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.skipif(not HAS_MINILM, reason="needs the embedded MiniLM")
async def test_wrong_kind_of_model_is_failed_precondition(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request("Hello", model="minilm"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Embed(pb.EmbedRequest(model="llama", inputs=["hi"])):
            pass
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "pooled embedding" in err.value.details()


async def test_duplicate_running_request_id_is_already_exists(stub):
    first = stub.Generate(request("Hello", request_id="dup-1", max_tokens=400))
    await first.read()  # started: the request is running
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request("Hello", request_id="dup-1"))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    first.cancel()


async def test_detokenize_outside_vocabulary(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Detokenize(pb.DetokenizeRequest(model="llama", token_ids=[5, 99999]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_plan_memory_rejects_negative_context(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.PlanMemory(pb.PlanMemoryRequest(model="llama", context_tokens=-1))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
