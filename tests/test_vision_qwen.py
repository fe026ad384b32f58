"""Qwen2.5-VL and Qwen3-VL with images, through a live server: greedy output equals
mlx-vlm's qwen2_5_vl / qwen3_vl on each tiny fixture alone, with two images, with images
of different grids, and inside a batch of eight mixing image and text rows (the tie rule
of tests/vision_helpers.py); a prompt's multi-axis positions and its shift are mlx-vlm's
(``get_rope_index``); Qwen3-VL's DeepStack features reach its first layers at every
chunking; the image changes the answer; a repeated image runs no tower and a
prefix-cache hit past an image keeps the image's positions; n-gram speculation (drafts
past the image, at the row's shift) and logprobs work on image prompts; the image token
typed as text is refused; GetModelInfo says its images come with positions; the memory plan
counts each checkpoint tensor once."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
import pytest_asyncio

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import model_pb2 as model_pb
from tests.fixtures.vision_qwen import IMAGE_PAD, VISION_START, build_qwen2_5_vl, build_qwen3_vl
from tests.helpers import generate
from tests.vision_helpers import (CASES, IMAGES, MEDIA, assert_plan_counts_checkpoint_once, case_chat,
                                  case_references, image_chat, image_part, matches, vision_server)

MAX_TOKENS = 12
# merged grids (h x w) the processors give: Qwen2.5-VL's 28-pixel units (64 x 64 -> 56 x 56, 96 x 80 -> 84 x 84,
# 70 x 90 -> 84 x 56 pixels; a 2 x 2 grid is exactly one of its tower's attention windows), Qwen3-VL's 32-pixel ones
GRIDS = {"qwen2_5_vl": {"gradient": (2, 2), "red-jpeg": (3, 3), "blue-webp": (2, 2), "green-gif": (3, 2)},
         "qwen3_vl": {"gradient": (2, 2), "red-jpeg": (2, 3), "blue-webp": (2, 2), "green-gif": (3, 2)}}
MORE = [("What is it?", ("gradient",)), ("What is it?", ("red-jpeg",))]
BUILD = {"qwen2_5_vl": build_qwen2_5_vl, "qwen3_vl": build_qwen3_vl}


@pytest.fixture(scope="module", params=list(BUILD))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory, family):
    return BUILD[family](tmp_path_factory.mktemp(f"vision-{family}") / "qwen")


@pytest.fixture(scope="module")
def reference(qwen_dir):
    """mlx-vlm's greedy tokens per case, computed before the module's server starts."""
    return case_references(qwen_dir, CASES + MORE, IMAGES, MAX_TOKENS)


@pytest_asyncio.fixture(scope="module")
async def served(qwen_dir, reference):
    async with vision_server(qwen_dir, "qwen") as (stub, engine):
        yield stub, engine.loaded.vision


def case_request(i: int, **kwargs) -> pb.GenerateRequest:
    req = case_chat((CASES + MORE)[i], IMAGES, MEDIA, "qwen", MAX_TOKENS)
    for name, value in kwargs.items():
        getattr(req, name).CopyFrom(value)
    return req


def test_prompt_positions_are_mlx_vlms(qwen_dir, family):
    """Two images of different grids between text: the [3, L] positions and the shift
    equal mlx-vlm's get_rope_index on the processor's ids."""
    import io

    import mlx.core as mx
    import mlx_vlm
    from PIL import Image

    from engine.vision.mrope import prompt_positions
    from engine.vision.prompt import PromptImage

    vlm, processor = mlx_vlm.load(str(qwen_dir))
    names = ("green-gif", "red-jpeg")
    content = [{"type": "image"}, {"type": "text", "text": "and"}, {"type": "image"},
               {"type": "text", "text": "Which of the two is brighter?"}]
    prompt = processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                     add_generation_prompt=True, tokenize=False)
    images = [Image.open(io.BytesIO(IMAGES[n])).convert("RGB") for n in names]
    inputs = processor(images=images, text=prompt)
    want, delta = vlm.language_model.get_rope_index(inputs["input_ids"], inputs["image_grid_thw"])
    ids = inputs["input_ids"][0].tolist()
    pad = processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    starts = [i for i, t in enumerate(ids) if t == pad and ids[i - 1] != pad]
    grids = GRIDS[family]
    spans = [PromptImage(s, grids[n][0] * grids[n][1], np.zeros(1), b"", grid=(1, *grids[n]))
             for s, n in zip(starts, names)]
    got, shift = prompt_positions(len(ids), spans)
    np.testing.assert_array_equal(got, np.array(want[:, 0, :]))
    assert shift == int(mx.array(delta).item()) < 0


async def test_image_chat_alone_equals_mlx_vlm(served, reference):
    stub, _ = served
    for i in (0, 1, 2, 3, 7):
        out = await generate(stub, case_request(i))
        assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH
        assert matches(out.token_ids, reference[i]), (CASES[i], out.token_ids, reference[i].tokens)


async def test_batch_of_eight_mixing_image_and_text_rows_equals_mlx_vlm(served, reference):
    stub, _ = served
    outs = await asyncio.gather(*(generate(stub, case_request(i)) for i in range(8)))
    for i, out in enumerate(outs):
        assert matches(out.token_ids, reference[i]), (CASES[i], out.token_ids, reference[i].tokens)


async def test_the_prompt_holds_each_grid_s_tokens(served, family):
    stub, _ = served
    for name, (h, w) in GRIDS[family].items():
        with_image = await generate(stub, image_chat("Hello there", image_part(IMAGES[name], MEDIA[name]),
                                                     model="qwen", max_tokens=1))
        text_only = await generate(stub, image_chat("Hello there", model="qwen", max_tokens=1))
        # the image: <|vision_start|>, h x w image tokens, <|vision_end|>
        assert with_image.started.prompt_tokens - text_only.started.prompt_tokens == h * w + 2


async def test_the_image_changes_the_answer(served, reference):
    stub, _ = served
    assert reference[8].tokens != reference[9].tokens
    for i in (8, 9):
        assert matches((await generate(stub, case_request(i))).token_ids, reference[i])


async def test_a_repeated_image_and_a_prefix_hit_keep_its_positions(served, reference, family):
    stub, tower = served
    first = await generate(stub, case_request(1))
    before = tower.encoded
    again = await generate(stub, case_request(1))
    assert tower.encoded == before
    assert again.started.cached_tokens > GRIDS[family]["red-jpeg"][0] * GRIDS[family]["red-jpeg"][1]
    assert matches(first.token_ids, reference[1]) and matches(again.token_ids, reference[1])


async def test_ngram_speculation_and_logprobs_on_an_image_prompt(served, reference):
    stub, _ = served
    spec = gen_pb.SpeculationOptions(mode=gen_pb.SPECULATION_MODE_NGRAM, num_draft_tokens=4)
    req = case_request(0, speculation=spec)
    req.logprobs, req.top_logprobs = True, 2
    out = await generate(stub, req)
    assert matches(out.token_ids, reference[0]), (out.token_ids, reference[0].tokens)
    assert sum(len(d.logprobs) for d in out.deltas) == len(out.token_ids)


@pytest.mark.parametrize("text", [f"look: {IMAGE_PAD}", f"look: {VISION_START}{IMAGE_PAD}"])
async def test_the_image_token_typed_as_text_is_refused(served, reference, text):
    stub, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, image_chat(text, image_part(IMAGES["gradient"]), model="qwen"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert matches((await generate(stub, case_request(0))).token_ids, reference[0])


async def test_model_info_says_its_images_come_with_positions(served):
    stub, _ = served
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="qwen"))).info
    assert info.capabilities.media.input == model_pb.MEDIA_INPUT_EMBEDDINGS_POSITIONS
    assert info.capabilities.media.video  # both families take video: tests/test_vision_video.py


@pytest.mark.parametrize("chunk", [3, 8, 1000])
def test_qwen3_vl_embeddings_and_deepstack_equal_mlx_vlms_at_any_chunking(tmp_path_factory, chunk):
    """Two images: the chunks' spliced embeddings and DeepStack features, put together,
    are mlx-vlm's (its embeddings, and each DeepStack layer's features at its visual
    positions), wherever chunk boundaries fall."""
    import io

    import mlx.core as mx
    import mlx_vlm
    from PIL import Image

    from engine.validation import Limits
    from engine.loading.model import load_generation_model
    from engine.requests import ChatMessage, ChatPrompt, ImagePart, TextPart
    from engine.vision.encoded import EncodedImages
    from engine.vision.prompt import expand_images
    from engine.vision.splice import ImageRows

    qwen = build_qwen3_vl(tmp_path_factory.mktemp("qwen3-chunks") / "qwen3")
    vlm, processor = mlx_vlm.load(str(qwen))
    names = ("red-jpeg", "green-gif")
    content = [*({"type": "image"} for _ in names), {"type": "text", "text": "Compare them."}]
    text = processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                   add_generation_prompt=True, tokenize=False)
    inputs = processor(images=[Image.open(io.BytesIO(IMAGES[n])).convert("RGB") for n in names], text=text)
    want = vlm.get_input_embeddings(inputs["input_ids"], inputs["pixel_values"],
                                    image_grid_thw=inputs["image_grid_thw"])
    loaded = load_generation_model(qwen, use_kernels=False)
    parts = (*(ImagePart(IMAGES[n], MEDIA[n]) for n in names), TextPart("Compare them."))
    prompt = ChatPrompt(messages=(ChatMessage("user", "Compare them.", parts=parts),))
    ids, images = expand_images(text, loaded.tokenizer, prompt, loaded.vision, Limits())
    assert ids == inputs["input_ids"][0].tolist()
    rows, encoder, tokens = ImageRows(images, len(ids)), EncodedImages(loaded.vision, 0), mx.array([ids])
    embeddings, deep = [], []
    for s in range(0, len(ids), chunk):
        embeddings.append(rows.embeddings(loaded.model, encoder, tokens[:, s : s + chunk], s))
        part = rows.deepstack
        deep.append(part[1] if part is not None else mx.zeros((2, 1, embeddings[-1].shape[1], 64)))
        assert part is None or part[0] == s
    np.testing.assert_allclose(np.array(mx.concatenate(embeddings, axis=1)), np.array(want.inputs_embeds),
                               rtol=1e-5, atol=1e-5)
    visual = np.array(want.visual_pos_masks[0])
    got = np.array(mx.concatenate(deep, axis=2))[:, 0]  # [k, L, hidden]
    assert not got[:, ~visual].any()
    for layer, features in enumerate(want.deepstack_visual_embeds):
        np.testing.assert_allclose(got[layer, visual], np.array(features), rtol=1e-5, atol=1e-5)


async def test_memory_plan_counts_each_checkpoint_tensor_once(served, qwen_dir):
    """The tower and mergers are counted, and the language model's arrays once (held by
    the text model, not also by mlx-vlm's)."""
    await assert_plan_counts_checkpoint_once(served[0], "qwen", qwen_dir)

