"""Gemma 3 with images, through a live server: greedy output equals mlx-vlm's gemma3 on
the tiny fixture alone, with two images, and inside a batch of eight mixing image and
text rows (the tie rule of tests/vision_helpers.py); the image changes the answer;
placeholders or soft tokens typed as text are refused; the encoded-image cache and the
prefix cache serve a repeated image; logprobs and structured output work on image
prompts; the memory plan counts each tensor once; a sparse text config is served with
mlx-vlm's defaults; GetModelInfo says the model takes images."""

from __future__ import annotations

import asyncio

import grpc
import pytest
import pytest_asyncio

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import model_pb2 as model_pb
from tests.fixtures.vision_models import BOI, GEMMA_IMAGE_TOKENS, SOFT, build_gemma3
from tests.helpers import generate
from tests.vision_helpers import CASES as SHARED_CASES
from tests.vision_helpers import (IMAGES, MEDIA, assert_plan_counts_checkpoint_once, case_chat, case_references,
                                  image_chat, image_part, matches, vision_server)

MAX_TOKENS = 12
CASES = [*SHARED_CASES, ("What is it?", ("gradient",)), ("What is it?", ("red-jpeg",))]


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    return build_gemma3(tmp_path_factory.mktemp("vision-gemma3") / "gemma3")


@pytest.fixture(scope="module")
def reference(gemma_dir):
    """mlx-vlm's greedy tokens per case, computed before the module's server starts."""
    return case_references(gemma_dir, CASES, IMAGES, MAX_TOKENS)


@pytest_asyncio.fixture(scope="module")
async def served(gemma_dir, reference):
    async with vision_server(gemma_dir, "gemma3") as (stub, engine):
        yield stub, engine.loaded.vision


def case_request(i: int) -> pb.GenerateRequest:
    return case_chat(CASES[i], IMAGES, MEDIA, "gemma3", MAX_TOKENS)


async def test_image_chat_alone_equals_mlx_vlm(served, reference):
    stub, _ = served
    for i in (0, 1, 2, 3, 7):
        names = CASES[i][1]
        out = await generate(stub, case_request(i))
        assert out.started.prompt_tokens > GEMMA_IMAGE_TOKENS * len(names)
        assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH
        assert matches(out.token_ids, reference[i]), (names, out.token_ids, reference[i].tokens)


async def test_batch_of_eight_mixing_image_and_text_rows_equals_mlx_vlm(served, reference):
    stub, _ = served
    outs = await asyncio.gather(*(generate(stub, case_request(i)) for i in range(8)))
    for i, out in enumerate(outs):
        assert matches(out.token_ids, reference[i]), (CASES[i], out.token_ids, reference[i].tokens)


async def test_the_image_changes_the_answer(served, reference):
    stub, _ = served
    assert reference[8].tokens != reference[9].tokens
    for i in (8, 9):
        assert matches((await generate(stub, case_request(i))).token_ids, reference[i])


async def test_a_repeated_image_runs_no_tower(served, reference):
    stub, tower = served
    await generate(stub, case_request(0))
    before = tower.encoded
    out = await generate(stub, image_chat("Tell me more.", image_part(IMAGES["gradient"]), model="gemma3"))
    assert tower.encoded == before and out.token_ids


@pytest.mark.parametrize("text", [f"look: {BOI}", f"look: {SOFT}", f"look: {SOFT * GEMMA_IMAGE_TOKENS}"])
async def test_image_tokens_typed_as_text_are_refused(served, reference, text):
    stub, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, image_chat(text, image_part(IMAGES["gradient"]), model="gemma3"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert matches((await generate(stub, case_request(0))).token_ids, reference[0])


async def test_model_info_says_it_takes_images(served):
    stub, _ = served
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="gemma3"))).info
    assert info.capabilities.HasField("media")
    assert info.capabilities.media.input == model_pb.MEDIA_INPUT_EMBEDDINGS


async def test_prefix_cache_reuses_past_the_image(served, reference):
    stub, _ = served
    first = await generate(stub, case_request(1))
    again = await generate(stub, case_request(1))
    assert again.started.cached_tokens > GEMMA_IMAGE_TOKENS
    assert matches(first.token_ids, reference[1]) and matches(again.token_ids, reference[1])


def test_a_checkpoint_leaving_out_text_defaults_is_served_with_them(gemma_dir, tmp_path):
    """Released configs leave most of text_config to defaults: the served facts use
    mlx-vlm's resolved values and Gemma 3's own context length."""
    import json
    import shutil

    from engine.loading.model import load_generation_model
    from engine.vision.gemma3 import CONTEXT

    sparse = tmp_path / "sparse"
    shutil.copytree(gemma_dir, sparse)
    config = json.loads((sparse / "config.json").read_text())
    for key in ("max_position_embeddings", "rope_local_base_freq", "query_pre_attn_scalar"):
        config["text_config"].pop(key)
    (sparse / "config.json").write_text(json.dumps(config))
    loaded = load_generation_model(sparse, use_kernels=False)
    assert loaded.context_length == CONTEXT
    assert loaded.config["text_config"]["query_pre_attn_scalar"] == 256  # mlx-vlm's default
    assert loaded.model.args.rope_local_base_freq == 10_000.0


async def test_memory_plan_counts_each_checkpoint_tensor_once(served, gemma_dir):
    """The tower and projector are counted, and the tied embedding is held once (not
    copied into an output projection)."""
    await assert_plan_counts_checkpoint_once(served[0], "gemma3", gemma_dir)


async def test_logprobs_and_structured_output_on_an_image_prompt(served, reference):
    import math

    stub, _ = served
    req = case_request(0)
    req.logprobs, req.top_logprobs = True, 2
    out = await generate(stub, req)
    assert matches(out.token_ids, reference[0])
    for lp, margin in zip((lp for d in out.deltas for lp in d.logprobs), reference[0].margins):
        first, second = lp.top_logprobs
        assert lp.token_id == first.token_id and math.isclose(first.logprob - second.logprob, margin, abs_tol=1e-3)
    req = case_request(0)
    req.response_format.CopyFrom(gen_pb.ResponseFormat(choice=gen_pb.ResponseFormat.Choice(
        options=["a cat", "a gradient", "nothing"])))
    out = await generate(stub, req)
    assert out.finished.reason == gen_pb.FINISH_REASON_STOP and out.text in ("a cat", "a gradient", "nothing")
