"""Encoded images in the object cache: a second request with the same image and another
question runs no vision tower and still equals mlx-vlm; another image does run it; each
model keeps its own; a failing or mis-sized image leaves nothing cached; the cache keeps
within its bytes. The prefix cache is off here, so only the image cache can skip the tower."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import pytest_asyncio

from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.models import ModelSet
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from tests.fixtures.vision_models import IMAGE_SIZE, build_llava
from tests.helpers import generate
from tests.test_ops_security import extra_server
from tests.vision_helpers import GRADIENT, encoded, image_chat, image_part, matches, vlm_reference

MAX_TOKENS = 8
RED = encoded((200, 30, 40), (96, 80), "JPEG")
BLUE = encoded((20, 40, 220), (64, 64), "PNG")
GREEN = encoded((10, 200, 60), (70, 90), "PNG")
CASES = [("What is in the picture?", (GRADIENT.read_bytes(),)), ("Describe the colours.", (GRADIENT.read_bytes(),)),
         ("Describe the colours.", (RED,)), ("Which of the two is brighter?", (BLUE, BLUE)),
         ("Say something about it", (GREEN,))]


def case_request(i: int, model: str = "llava"):
    text, images = CASES[i]
    media = ["image/jpeg" if data[:3] == b"\xff\xd8\xff" else "image/png" for data in images]
    return image_chat(text, *(image_part(d, m) for d, m in zip(images, media)), model=model, max_tokens=MAX_TOKENS)


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    return build_llava(tmp_path_factory.mktemp("vision-reuse") / "llava")


@pytest.fixture(scope="module")
def reference(llava_dir):
    return vlm_reference(llava_dir, CASES, MAX_TOKENS)


def _config(image_cache_bytes: int) -> GenerationConfig:
    return GenerationConfig(scheduler=SchedulerConfig(max_active=4, max_queued=8, prefill_chunk=8, tick_tokens=24,
                                                      min_prefill_tokens=4, prefix_cache_bytes=0,
                                                      image_cache_bytes=image_cache_bytes))


@pytest_asyncio.fixture(scope="module")
async def served(llava_dir, reference):
    engines = {name: GenerationEngine(str(llava_dir), name=name, config=_config(size))
               for name, size in (("llava", 64 << 20), ("other", 64 << 20), ("uncached", 0))}
    models = ModelSet(list(engines.values()), [])
    await models.start()
    async with extra_server(models) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield pb_grpc.InferenceServiceStub(channel), {n: e.loaded.vision for n, e in engines.items()}
    await models.close()


async def test_same_image_another_question_runs_no_tower_and_equals_mlx_vlm(served, reference):
    stub, towers = served
    tower = towers["llava"]
    before = tower.encoded
    first = await generate(stub, case_request(0))
    assert tower.encoded == before + 1
    again = await generate(stub, case_request(1))  # the same image, another question
    assert tower.encoded == before + 1
    assert matches(first.token_ids, reference[0]) and matches(again.token_ids, reference[1])
    assert reference[0].tokens != reference[1].tokens
    other = await generate(stub, case_request(2))  # another image, the same question as before
    assert tower.encoded == before + 2
    assert matches(other.token_ids, reference[2])


async def test_an_image_twice_in_one_prompt_runs_the_tower_once(served, reference):
    stub, towers = served
    before = towers["llava"].encoded
    out = await generate(stub, case_request(3))
    assert towers["llava"].encoded == before + 1
    assert matches(out.token_ids, reference[3])


async def test_each_model_encodes_its_own_and_zero_bytes_turns_the_cache_off(served, reference):
    stub, towers = served
    await generate(stub, case_request(4))
    before = {name: tower.encoded for name, tower in towers.items()}
    for name in ("other", "other", "uncached", "uncached"):
        out = await generate(stub, case_request(4, model=name))
        assert matches(out.token_ids, reference[4])
    assert towers["llava"].encoded == before["llava"]
    assert towers["other"].encoded == before["other"] + 1  # never another model's features
    assert towers["uncached"].encoded == before["uncached"] + 2


@pytest.fixture(scope="module")
def tower(llava_dir):
    import json

    from engine.vision.model import load_vision_model

    return load_vision_model(llava_dir, json.loads((llava_dir / "config.json").read_text()))[2]


def _image(tower, digest: bytes, size: int = IMAGE_SIZE, length: int | None = None):
    from engine.vision.prompt import PromptImage

    pixels = np.random.default_rng(digest[0]).normal(0, 1, (1, 3, size, size)).astype(np.float32)
    return PromptImage(0, tower.tokens_for(pixels) if length is None else length, pixels, digest)


def test_a_failing_or_mis_sized_image_leaves_nothing_cached(tower):
    from engine.vision.encoded import EncodedImages

    images = EncodedImages(tower, 1 << 20)
    digest = b"a" * 32
    with pytest.raises(ValueError):  # the tower cannot take pixels of another size
        images.features(_image(tower, digest, size=IMAGE_SIZE // 2, length=4))
    with pytest.raises(ValueError):  # a run sized wrong for the features
        images.features(_image(tower, digest, length=tower.tokens_for(np.zeros((1, 3, 64, 64))) - 1))
    assert images.entries == 0 and images.bytes == 0
    before = tower.encoded
    good = images.features(_image(tower, digest))
    assert images.entries == 1 and tower.encoded == before + 1
    assert np.array_equal(np.array(images.features(_image(tower, digest))), np.array(good))
    assert tower.encoded == before + 1 and images.hits == 1


def test_the_cache_keeps_within_its_bytes(tower):
    from engine.vision.encoded import EncodedImages

    one = EncodedImages(tower, 1 << 20).features(_image(tower, b"x" * 32)).nbytes
    images = EncodedImages(tower, 2 * one + 1024)  # room for two, with their keys
    for k in b"abc":
        images.features(_image(tower, bytes([k]) * 32))
    assert images.entries == 2 and images.bytes <= 2 * one + 1024
    before = tower.encoded
    images.features(_image(tower, b"c" * 32))
    images.features(_image(tower, b"b" * 32))
    assert tower.encoded == before  # the two most recent stayed
    images.features(_image(tower, b"a" * 32))
    assert tower.encoded == before + 1  # the least recent went
    tiny = EncodedImages(tower, one // 2)  # smaller than one image: nothing is kept
    tiny.features(_image(tower, b"a" * 32))
    assert tiny.entries == 0 and tiny.bytes == 0
