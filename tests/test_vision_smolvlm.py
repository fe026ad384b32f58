"""SmolVLM / Idefics3 with images, through a live server: greedy output equals mlx-vlm's
idefics3 on the tiny fixture alone, with two images, with images of different sizes
(different tile grids, so different numbers of image tokens), and inside a batch of eight
mixing image and text rows (the tie rule of tests/vision_helpers.py); the image changes
the answer; the placeholder, image tokens or the processor's markers typed as text are
refused; the encoded-image cache and the prefix cache serve a repeated image; logprobs
and structured output work on image prompts; text-only turns of a conversation reach
SmolVLM's parts-only template; the spliced embeddings are mlx-vlm's at any chunking; the
memory plan counts each tensor once; GetModelInfo says the model takes images; the
"smolvlm" model type is served the same way."""

from __future__ import annotations

import asyncio

import grpc
import pytest
import pytest_asyncio

from engine.generation.config import GenerationConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.models import ModelSet
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.gen.mlxgrpc.v1 import model_pb2 as model_pb
from tests.fixtures.vision_models import FAKE, GLOBAL_IMG, IMAGE_TOKEN, SMOL_TILE_TOKENS, build_smolvlm
from tests.helpers import generate
from tests.test_ops_security import extra_server
from tests.vision_helpers import (
    GRADIENT,
    assert_plan_counts_checkpoint_once,
    case_chat,
    case_references,
    encoded,
    image_chat,
    image_part,
    matches,
    vision_server,
    vlm_chat_reference,
    vlm_reference,
)

MAX_TOKENS = 12
# tiles (a 2 x 2 grid, 1 x 2, or the grid of a small square) plus the global view
IMAGES = {"gradient": GRADIENT.read_bytes(), "red-jpeg": encoded((200, 30, 40), (96, 80), "JPEG"),
          "wide-webp": encoded((20, 40, 220), (96, 40), "WEBP"), "tall-gif": encoded((10, 200, 60), (30, 90), "GIF")}
MEDIA = {"gradient": "image/png", "red-jpeg": "image/jpeg", "wide-webp": "image/webp", "tall-gif": "image/gif"}
# the processor's tiles: 2 x 2 + global (96 x 80 -> 64 x 53 -> 64 x 64), 1 x 2 + global, 2 x 1 + global
TILES = {"red-jpeg": 5, "wide-webp": 3, "tall-gif": 3}
CASES = [("What is in the picture?", ("gradient",)), ("Describe the colours.", ("red-jpeg",)),
         ("Say something about it", ("wide-webp",)), ("Is it round?", ("tall-gif",)),
         ("The lighthouse keeper counted the boats.", ()), ("Hello there", ()),
         ("Numbers: 1 2 3 4 5", ()), ("Which of the two is brighter?", ("wide-webp", "red-jpeg")),
         ("What is it?", ("gradient",)), ("What is it?", ("red-jpeg",))]


@pytest.fixture(scope="module")
def smol_dir(tmp_path_factory):
    return build_smolvlm(tmp_path_factory.mktemp("vision-smolvlm") / "smolvlm")


@pytest.fixture(scope="module")
def reference(smol_dir):
    """mlx-vlm's greedy tokens per case, computed before the module's server starts."""
    return case_references(smol_dir, CASES, IMAGES, MAX_TOKENS)


@pytest_asyncio.fixture(scope="module")
async def served(smol_dir, reference):
    async with vision_server(smol_dir, "smolvlm") as (stub, engine):
        yield stub, engine.loaded.vision


def case_request(i: int) -> pb.GenerateRequest:
    return case_chat(CASES[i], IMAGES, MEDIA, "smolvlm", MAX_TOKENS)


async def test_image_chat_alone_equals_mlx_vlm(served, reference):
    stub, _ = served
    for i in (0, 1, 2, 3, 7):
        out = await generate(stub, case_request(i))
        assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH
        assert matches(out.token_ids, reference[i]), (CASES[i], out.token_ids, reference[i].tokens)


async def test_the_tile_grid_follows_the_image_size(served, smol_dir):
    """Each image's placeholder becomes its own grid's text: the prompt is as long as the
    processor makes it, one 16-token run per tile, for images of different grids."""
    import io

    import mlx_vlm
    from PIL import Image

    stub, _ = served
    _, processor = mlx_vlm.load(str(smol_dir))
    for name, tiles in TILES.items():
        image = Image.open(io.BytesIO(IMAGES[name])).convert("RGB")
        content = [{"type": "image"}, {"type": "text", "text": "Hello there"}]
        prompt = processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                         add_generation_prompt=True, tokenize=False)
        inputs = processor(images=[image], text=prompt)
        assert inputs["pixel_values"].shape[1] == tiles
        req = image_chat("Hello there", image_part(IMAGES[name], MEDIA[name]), model="smolvlm", max_tokens=1)
        assert (await generate(stub, req)).started.prompt_tokens == inputs["input_ids"].shape[1]


async def test_batch_of_eight_mixing_image_and_text_rows_equals_mlx_vlm(served, reference):
    stub, _ = served
    outs = await asyncio.gather(*(generate(stub, case_request(i)) for i in range(8)))
    for i, out in enumerate(outs):
        assert matches(out.token_ids, reference[i]), (CASES[i], out.token_ids, reference[i].tokens)


async def test_a_conversation_with_text_only_turns_equals_mlx_vlm(served, smol_dir):
    """SmolVLM's template reads every content as a list of parts: the system, assistant
    and text-only user turns reach it as text parts (as a plain string they would render
    as nothing), so the prompt and the answer are mlx-vlm's."""
    stub, _ = served
    chat = [("system", "You describe pictures.", ()), ("user", "What is it?", (IMAGES["wide-webp"],)),
            ("assistant", "A blue band.", ()), ("user", "And the colour again?", ())]
    ref = vlm_chat_reference(smol_dir, [chat], MAX_TOKENS)[0]
    messages = [gen_pb.ChatMessage(role=role, parts=[*(image_part(data, MEDIA["wide-webp"]) for data in images),
                                                     gen_pb.ContentPart(text=text)]) for role, text, images in chat]
    req = pb.GenerateRequest(model="smolvlm", chat=gen_pb.ChatMessages(messages=messages),
                             stopping=gen_pb.StoppingCriteria(max_tokens=MAX_TOKENS, ignore_eos=True))
    out = await generate(stub, req)
    assert matches(out.token_ids, ref), (out.token_ids, ref.tokens)


async def test_the_image_changes_the_answer(served, reference):
    stub, _ = served
    assert reference[8].tokens != reference[9].tokens
    for i in (8, 9):
        assert matches((await generate(stub, case_request(i))).token_ids, reference[i])


async def test_a_repeated_image_runs_no_tower(served, reference):
    stub, tower = served
    await generate(stub, case_request(1))
    before = tower.encoded
    out = await generate(stub, image_chat("Tell me more.", image_part(IMAGES["red-jpeg"], MEDIA["red-jpeg"]),
                                          model="smolvlm"))
    assert tower.encoded == before and out.token_ids


@pytest.mark.parametrize("text", [f"look: {IMAGE_TOKEN}", f"look: {IMAGE_TOKEN * SMOL_TILE_TOKENS}",
                                  f"look: {FAKE}", f"look: {GLOBAL_IMG}", "look: <row_1_col_2>"])
async def test_image_tokens_and_markers_typed_as_text_are_refused(served, reference, text):
    stub, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, image_chat(text, image_part(IMAGES["gradient"]), model="smolvlm"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert matches((await generate(stub, case_request(0))).token_ids, reference[0])


async def test_model_info_says_it_takes_images(served):
    stub, _ = served
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="smolvlm"))).info
    assert info.capabilities.HasField("media")
    assert info.capabilities.media.input == model_pb.MEDIA_INPUT_EMBEDDINGS


async def test_prefix_cache_reuses_past_the_image(served, reference):
    stub, _ = served
    first = await generate(stub, case_request(2))
    again = await generate(stub, case_request(2))
    assert again.started.cached_tokens > TILES["wide-webp"] * SMOL_TILE_TOKENS
    assert matches(first.token_ids, reference[2]) and matches(again.token_ids, reference[2])


async def test_memory_plan_counts_each_checkpoint_tensor_once(served, smol_dir):
    """The tower and connector are counted, and the language model's arrays once (held by
    the text model, not also by mlx-vlm's)."""
    await assert_plan_counts_checkpoint_once(served[0], "smolvlm", smol_dir)


async def test_the_smolvlm_model_type_is_served_as_mlx_vlm_serves_it(tmp_path):
    """SmolVLM2's model type ("smolvlm", SmolVLMProcessor) on the same weights: the same
    text expansion and greedy tokens as mlx-vlm's smolvlm."""
    smol = build_smolvlm(tmp_path / "smolvlm", model_type="smolvlm")
    cases = [CASES[7], CASES[2]]
    ref = vlm_reference(smol, [(text, tuple(IMAGES[n] for n in names)) for text, names in cases], MAX_TOKENS)

    models = ModelSet([GenerationEngine(str(smol), name="smolvlm2", config=GenerationConfig())], [])
    await models.start()
    try:
        async with extra_server(models) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.InferenceServiceStub(channel)
            outs = [await generate(stub, image_chat(text, *(image_part(IMAGES[n], MEDIA[n]) for n in names),
                                                    model="smolvlm2", max_tokens=MAX_TOKENS))
                    for text, names in cases]
    finally:
        await models.close()
    for out, r, case in zip(outs, ref, cases):
        assert matches(out.token_ids, r), (case, out.token_ids, r.tokens)


@pytest.mark.parametrize("chunk", [1, 5, 8, 17, 1000])
def test_spliced_embeddings_equal_mlx_vlms_at_any_chunking(smol_dir, chunk):
    """Two images of different grids: our ids are the processor's, and the prompt's input
    embeddings, built chunk by chunk (boundaries inside runs, on markers, between
    images), are mlx-vlm's (its masked scatter of the tower's features)."""
    import io

    import mlx.core as mx
    import mlx_vlm
    import numpy as np
    from PIL import Image

    from engine.loading.model import load_generation_model
    from engine.requests import ChatMessage, ChatPrompt, ImagePart, TextPart
    from engine.validation import Limits
    from engine.vision.encoded import EncodedImages
    from engine.vision.prompt import expand_images
    from engine.vision.splice import ImageRows

    names = ("wide-webp", "red-jpeg")
    vlm, processor = mlx_vlm.load(str(smol_dir))
    content = [{"type": "image"}] * 2 + [{"type": "text", "text": "Compare them."}]
    text = processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                   add_generation_prompt=True, tokenize=False)
    pil = [Image.open(io.BytesIO(IMAGES[n])).convert("RGB") for n in names]
    inputs = processor(images=pil, text=text)
    want = vlm.get_input_embeddings(inputs["input_ids"], inputs["pixel_values"]).inputs_embeds

    loaded = load_generation_model(smol_dir, use_kernels=False)
    parts = (*(ImagePart(IMAGES[n], MEDIA[n]) for n in names), TextPart("Compare them."))
    prompt = ChatPrompt(messages=(ChatMessage("user", "Compare them.", parts=parts),))
    ids, images = expand_images(text, loaded.tokenizer, prompt, loaded.vision, Limits())
    assert ids == inputs["input_ids"][0].tolist()
    assert [len(img.feature_runs) for img in images] == [TILES[n] for n in names]
    rows, encoder = ImageRows(images, len(ids)), EncodedImages(loaded.vision, 0)
    tokens = mx.array([ids])
    got = mx.concatenate([rows.embeddings(loaded.model, encoder, tokens[:, s : s + chunk], s)
                          for s in range(0, len(ids), chunk)], axis=1)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)


async def test_logprobs_and_structured_output_on_an_image_prompt(served, reference):
    import math

    stub, _ = served
    req = case_request(1)
    req.logprobs, req.top_logprobs = True, 2
    out = await generate(stub, req)
    assert matches(out.token_ids, reference[1])
    for lp, margin in zip((lp for d in out.deltas for lp in d.logprobs), reference[1].margins):
        first, second = lp.top_logprobs
        assert lp.token_id == first.token_id and math.isclose(first.logprob - second.logprob, margin, abs_tol=1e-3)
    req = case_request(1)
    req.response_format.CopyFrom(gen_pb.ResponseFormat(choice=gen_pb.ResponseFormat.Choice(
        options=["a cat", "a gradient", "nothing"])))
    out = await generate(stub, req)
    assert out.finished.reason == gen_pb.FINISH_REASON_STOP and out.text in ("a cat", "a gradient", "nothing")
