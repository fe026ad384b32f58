"""The request features on image prompts, through a live server on the LLaVA fixture:
logprobs (the top two agree with mlx-vlm's margin), stop strings, structured output,
n-gram speculation (the same tokens as without it), cancellation at any moment (nothing
left behind), and the memory plan's weights (the vision tower included)."""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest
import pytest_asyncio

from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.models import ModelSet
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from tests.fixtures.vision_models import build_llava
from tests.helpers import generate
from tests.test_ops_security import extra_server
from tests.vision_helpers import (
    GRADIENT,
    assert_plan_counts_checkpoint_once,
    image_chat,
    image_part,
    matches,
    vlm_reference,
)

MAX_TOKENS = 16
QUESTION = "What is in the picture?"


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    return build_llava(tmp_path_factory.mktemp("vision-features") / "llava")


@pytest.fixture(scope="module")
def reference(llava_dir):
    return vlm_reference(llava_dir, [(QUESTION, (GRADIENT.read_bytes(),))], MAX_TOKENS)[0]


@pytest_asyncio.fixture(scope="module")
async def served(llava_dir, reference):
    config = GenerationConfig(scheduler=SchedulerConfig(max_active=4, max_queued=8, prefill_chunk=8))
    models = ModelSet([GenerationEngine(str(llava_dir), name="llava", config=config)], [])
    await models.start()
    async with extra_server(models) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield {"stub": pb_grpc.InferenceServiceStub(channel), "models": models}
    await models.close()


@pytest.fixture
def stub(served):
    return served["stub"]


def request(**kw):
    return image_chat(QUESTION, image_part(GRADIENT.read_bytes()), max_tokens=kw.pop("max_tokens", MAX_TOKENS), **kw)


async def test_logprobs_on_an_image_prompt_agree_with_mlx_vlm(stub, reference):
    out = await generate(stub, request(logprobs=True, top_logprobs=2))
    assert matches(out.token_ids, reference)
    logprobs = [lp for d in out.deltas for lp in d.logprobs]
    assert [lp.token_id for lp in logprobs] == out.token_ids
    for lp, margin in zip(logprobs, reference.margins):
        first, second = lp.top_logprobs
        assert lp.token_id == first.token_id and math.isclose(lp.logprob, first.logprob, abs_tol=1e-6)
        assert math.isclose(first.logprob - second.logprob, margin, abs_tol=1e-3)


async def test_a_stop_string_ends_an_image_answer(stub):
    plain = await generate(stub, request())
    assert len(plain.text) > 8
    stop = plain.text[len(plain.text) // 2:][:3]
    cut = plain.text.index(stop)
    req = request()
    req.stopping.stop.append(stop)
    out = await generate(stub, req)
    assert out.finished.reason == gen_pb.FINISH_REASON_STOP and out.text == plain.text[:cut]


async def test_structured_output_on_an_image_prompt(stub):
    choice = gen_pb.ResponseFormat(choice=gen_pb.ResponseFormat.Choice(options=["a cat", "a gradient", "nothing"]))
    out = await generate(stub, request(response_format=choice))
    assert out.finished.reason == gen_pb.FINISH_REASON_STOP and out.text in ("a cat", "a gradient", "nothing")
    regex = gen_pb.ResponseFormat(regex="[0-9]{3}-[a-z]{2}")
    out = await generate(stub, request(response_format=regex))
    assert out.finished.reason == gen_pb.FINISH_REASON_STOP
    assert len(out.text) == 6 and out.text[:3].isdigit() and out.text[3] == "-" and out.text[4:].isalpha()


async def test_ngram_speculation_keeps_an_image_answer(stub, reference):
    off = await generate(stub, request(speculation=gen_pb.SpeculationOptions(mode=gen_pb.SPECULATION_MODE_OFF)))
    on = await generate(stub, request(speculation=gen_pb.SpeculationOptions(mode=gen_pb.SPECULATION_MODE_NGRAM,
                                                                              num_draft_tokens=4)))
    assert on.token_ids == off.token_ids and matches(on.token_ids, reference)


async def test_the_memory_plan_counts_the_vision_tower(stub, llava_dir):
    await assert_plan_counts_checkpoint_once(stub, "llava", llava_dir)


async def test_cancel_while_an_image_is_prepared_leaves_nothing_behind(stub, served):
    from tests.test_cancellation import read_rest, settled

    for i, delay in enumerate((0.0, 0.002, 0.01, 0.05)):  # before, during and after the image's preparation
        call = stub.Generate(request(max_tokens=3000, request_id=f"image-cancel-{i}"))
        await asyncio.sleep(delay)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call.read()
    for i in range(2):  # and by the Cancel RPC once it streams
        call = stub.Generate(request(max_tokens=3000, request_id=f"image-cancel-rpc-{i}"))
        assert (await call.read()).WhichOneof("event") == "started"
        assert (await stub.Cancel(pb.CancelRequest(request_id=f"image-cancel-rpc-{i}"))).cancelled
        events = await read_rest(call)
        assert events[-1].finished.reason == gen_pb.FINISH_REASON_CANCELLED
    await settled(served, name="llava")
    out = await generate(stub, request())  # and the model still answers
    assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH
