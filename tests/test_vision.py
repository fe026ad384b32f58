"""Images in chat prompts, through a live server: greedy output equals mlx-vlm's on the
LLaVA fixture alone and inside a batch mixing image and text rows; hostile images are
refused (INVALID_ARGUMENT naming the field) and the server keeps answering; a text model
refuses images (FAILED_PRECONDITION); GetModelInfo says which models take images."""

from __future__ import annotations

import asyncio

import grpc
import pytest
import pytest_asyncio

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import model_pb2 as model_pb
from tests.fixtures.vision_models import IMAGE_TOKENS, build_llava
from tests.helpers import details, generate
from tests.vision_helpers import (CASES, IMAGES, MEDIA, case_chat, case_references, encoded, image_chat, image_part,
                                  matches, png_claiming, vision_server)

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    return build_llava(tmp_path_factory.mktemp("vision") / "llava")


@pytest.fixture(scope="module")
def reference(llava_dir):
    """mlx-vlm's greedy tokens per case, computed before the module's server starts."""
    return case_references(llava_dir, CASES, IMAGES, MAX_TOKENS)


@pytest_asyncio.fixture(scope="module")
async def stub(llava_dir, fixture_models, reference):
    async with vision_server(llava_dir, "llava", (fixture_models["llama"], "llama")) as (stub, _):
        yield stub


def case_request(i: int) -> pb.GenerateRequest:
    return case_chat(CASES[i], IMAGES, MEDIA, "llava", MAX_TOKENS)


async def test_image_chat_alone_equals_mlx_vlm(stub, reference):
    for i in (0, 1, 2, 3, 7):
        name = CASES[i][1]
        out = await generate(stub, case_request(i))
        assert out.started.prompt_tokens > IMAGE_TOKENS * len(name)
        assert out.text and out.finished.reason == gen_pb.FINISH_REASON_LENGTH
        assert matches(out.token_ids, reference[i]), (name, out.token_ids, reference[i].tokens)


async def test_batch_mixing_image_and_text_rows_equals_mlx_vlm(stub, reference):
    outs = await asyncio.gather(*(generate(stub, case_request(i)) for i in range(len(CASES))))
    for i, out in enumerate(outs):
        assert matches(out.token_ids, reference[i]), (CASES[i], out.token_ids, reference[i].tokens)


async def test_different_images_give_different_outputs(stub, reference):
    """The image reaches the model: the same text with another image changes the tokens."""
    assert len({tuple(r.tokens) for r in reference[:4]}) == 4
    same_text = [await generate(stub, image_chat("What is it?", image_part(IMAGES[name], MEDIA[name])))
                 for name in ("gradient", "red-jpeg")]
    assert same_text[0].token_ids != same_text[1].token_ids


HOSTILE = [
    ("truncated png", [image_part(IMAGES["gradient"][:200])], "chat.messages[0].parts[0].image.data"),
    ("png claiming 30000x30000", [image_part(png_claiming(30000, 30000))], "chat.messages[0].parts[0].image.data"),
    ("png claiming 5000x5000", [image_part(png_claiming(5000, 5000))], "chat.messages[0].parts[0].image.data"),
    ("png sent as jpeg", [image_part(IMAGES["gradient"], "image/jpeg")], "chat.messages[0].parts[0].image.media_type"),
    ("unknown media type", [image_part(IMAGES["gradient"], "image/bmp")], "chat.messages[0].parts[0].image.media_type"),
    ("not an image", [image_part(b"hello world, not pixels")], "chat.messages[0].parts[0].image.media_type"),
    ("empty image", [image_part(b"")], "chat.messages[0].parts[0].image.data"),
    ("100 images", [image_part(IMAGES["gradient"])] * 100, "chat.messages"),
]


@pytest.mark.parametrize("name,images,field", HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_hostile_images_are_invalid_argument_and_the_server_answers(stub, reference, name, images, field):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, image_chat("What is it?", *images))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    found = details(err.value)
    assert found["ErrorInfo"].reason == "INVALID_FIELD"
    assert [v.field for v in found["BadRequest"].field_violations] == [field]
    out = await generate(stub, case_request(0))
    assert matches(out.token_ids, reference[0])


async def test_image_placeholder_typed_as_text_is_refused(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, image_chat("look: <image>", image_part(IMAGES["gradient"])))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_image_to_a_text_model_is_failed_precondition(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, image_chat("What is it?", image_part(IMAGES["gradient"]), model="llama"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert details(err.value)["ErrorInfo"].reason == "UNSUPPORTED_OPERATION"


async def test_text_parts_still_reach_text_models(stub):
    req = pb.GenerateRequest(model="llama", chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(
        role="user", parts=[gen_pb.ContentPart(text="Hello "), gen_pb.ContentPart(text="there")])]),
        stopping=gen_pb.StoppingCriteria(max_tokens=4))
    plain = req.__deepcopy__()
    plain.chat.messages[0].ClearField("parts")
    plain.chat.messages[0].content = "Hello there"
    assert (await generate(stub, req)).token_ids == (await generate(stub, plain)).token_ids


async def test_model_info_says_which_models_take_images(stub):
    llava = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llava"))).info
    assert llava.capabilities.HasField("media")
    assert llava.capabilities.media.input == model_pb.MEDIA_INPUT_EMBEDDINGS
    assert not llava.capabilities.media.video
    llama = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"))).info
    assert not llama.capabilities.HasField("media")


async def test_prefix_cache_keys_image_positions_by_the_image(stub, reference):
    """The same image and text hit the cache past the image and give the same tokens; the
    same text with another image hits at most the prefix before its image."""
    first = await generate(stub, case_request(1))
    again = await generate(stub, case_request(1))
    assert again.started.cached_tokens >= 4 + IMAGE_TOKENS
    assert matches(first.token_ids, reference[1]) and matches(again.token_ids, reference[1])
    text, _ = CASES[1]
    unseen = encoded((200, 30, 41), (96, 80), "JPEG")  # one value off case 1's image
    other = await generate(stub, image_chat(text, image_part(unseen, "image/jpeg"), max_tokens=MAX_TOKENS))
    assert other.started.cached_tokens <= 4  # "<|im_start|>user\n" precedes the image


def test_image_key_ids_lie_beyond_any_vocabulary():
    import numpy as np

    from engine.vision.prompt import PromptImage
    from engine.vision.splice import KEY_BASE, ImageRows

    pixels = np.zeros((1, 3, 4, 4), np.float32)
    a, b = (ImageRows((PromptImage(2, 5, pixels, digest),), 8) for digest in (b"a" * 32, b"b" * 32))
    tokens = [7, 8, 600, 600, 600, 600, 600, 9]
    key_a, key_b = a.key(tokens), b.key(tokens)
    assert key_a[:2] == [7, 8] and key_a[7:] == [9] and key_a == a.key(tokens)
    assert all(KEY_BASE <= t < 1 << 32 for t in key_a[2:7] + key_b[2:7])
    assert all(x != y for x, y in zip(key_a[2:7], key_b[2:7]))
    assert a.key(tokens[:4]) == key_a[:4]  # a prefix ending inside the run
