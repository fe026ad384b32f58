"""Qwen3-Omni with audio in the prompt, through a live server: greedy output equals mlx-vlm's
own audio path (its ``load_audio`` from the file, its processor, its thinker) on the tiny
fixture, alone and inside a batch of eight mixing audio, image and text rows with prefill
chunks of 8 falling inside the audio's runs; the prompt's ids and the mel features the
tower reads equal mlx-vlm's processor's; a repeated audio file runs no tower; GetModelInfo
says the model takes audio and the memory plan counts the thinker's weights once. Hostile
audio (ten hours claimed, cut short, mislabelled, empty, too many files, the audio token
typed as text) is INVALID_ARGUMENT naming the part,
from the header where the header says it, and the server goes on serving; audio to a model
that takes none is FAILED_PRECONDITION."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
import pytest_asyncio

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import speech_pb2 as spb
from tests.fixtures.omni import AUDIO_PAD, build_qwen3_omni
from tests.fixtures.vision_models import build_llava
from tests.fixtures.whisper import wav, wav_bytes
from tests.helpers import generate
from tests.vision_helpers import (
    IMAGES,
    MEDIA,
    Reference,
    assert_part_refused,
    assert_plan_counts_checkpoint_once,
    image_part,
    matches,
    refused,
    vision_server,
)

MAX_TOKENS = 10
AUDIO = {"chirp": wav(2.5, rate=22050, channels=2, seed=1), "short": wav(1.2, seed=3), "long": wav(4.0, seed=4)}
# (text, audio names, image names): the parts in the order audio, images, text
CASES = [("What is said?", ("chirp",), ()), ("Describe the sound.", ("short",), ()),
         ("Listen, then look.", ("short",), ("gradient",)), ("Two clips.", ("long", "chirp"), ()),
         ("What is in the picture?", (), ("gradient",)), ("The lighthouse keeper counted the boats.", (), ()),
         ("Hello there", (), ()), ("Numbers: 1 2 3 4 5", (), ())]


def audio_part(name: str) -> gen_pb.ContentPart:
    return gen_pb.ContentPart(audio=spb.Audio(data=AUDIO[name], media_type="audio/wav"))


def chat(text: str, *parts: gen_pb.ContentPart, model: str = "omni", max_tokens: int = MAX_TOKENS
         ) -> pb.GenerateRequest:
    return pb.GenerateRequest(model=model, chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(
        role="user", parts=[*parts, gen_pb.ContentPart(text=text)])]),
        stopping=gen_pb.StoppingCriteria(max_tokens=max_tokens, ignore_eos=True))


def case_request(i: int) -> pb.GenerateRequest:
    text, audio, images = CASES[i]
    return chat(text, *(audio_part(a) for a in audio), *(image_part(IMAGES[n], MEDIA[n]) for n in images))


def mlx_vlm_inputs(processor, tmp_path, text: str, audio: tuple[str, ...], images: tuple[str, ...]):
    """mlx-vlm's inputs for one case: the audio read from files by its own loader."""
    import io

    from mlx_vlm.utils import load_audio, prepare_inputs
    from PIL import Image

    content = ([{"type": "audio"}] * len(audio) + [{"type": "image"}] * len(images)
               + [{"type": "text", "text": text}])
    prompt = processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                     add_generation_prompt=True, tokenize=False)
    heard = []
    for name in audio:
        path = tmp_path / f"{name}.wav"
        path.write_bytes(AUDIO[name])
        heard.append(load_audio(str(path), processor.feature_extractor.sampling_rate))
    pictures = [Image.open(io.BytesIO(IMAGES[n])).convert("RGB") for n in images] or None
    return prepare_inputs(processor, images=pictures, audio=heard or None, prompts=prompt)


@pytest.fixture(scope="module")
def omni_dir(tmp_path_factory):
    return build_qwen3_omni(tmp_path_factory.mktemp("audio-omni") / "omni")


@pytest.fixture(scope="module")
def reference(omni_dir, tmp_path_factory):
    """mlx-vlm's greedy tokens per case, computed before the module's server starts."""
    import mlx.core as mx
    import mlx_vlm
    from mlx_vlm.generate.ar import generate_step

    model, processor = mlx_vlm.load(str(omni_dir))
    tmp = tmp_path_factory.mktemp("audio-files")
    out = []
    for text, audio, images in CASES:
        inputs = mlx_vlm_inputs(processor, tmp, text, audio, images)
        extra = {k: inputs[k] for k in ("input_features", "feature_attention_mask", "image_grid_thw") if k in inputs}
        tokens, margins = [], []
        steps = generate_step(inputs["input_ids"], model, inputs.get("pixel_values"), None, temperature=0.0,
                              max_tokens=MAX_TOKENS, **extra)
        for (token, logprobs), _ in zip(steps, range(MAX_TOKENS)):
            top2 = mx.sort(logprobs.reshape(-1))[-2:].tolist()
            tokens.append(int(token))
            margins.append(top2[1] - top2[0])
        out.append(Reference(tokens, margins))
    return out


@pytest_asyncio.fixture(scope="module")
async def served(omni_dir, reference, tmp_path_factory):
    llava = build_llava(tmp_path_factory.mktemp("audio-llava") / "llava")
    async with vision_server(omni_dir, "omni", (llava, "llava")) as (stub, engine):
        yield stub, engine.loaded.vision


@pytest.mark.parametrize("names", [(("chirp",), ()), (("long", "short"), ("gradient",))])
def test_audio_ids_and_features_are_mlx_vlms(omni_dir, tmp_path, names):
    """Audio files (and an image) between text: the prompt's ids equal mlx-vlm's
    processor's, each file's mel frames its features' and the tower's output its own."""
    import mlx.core as mx
    import mlx_vlm

    from engine.loading.model import load_generation_model
    from engine.requests import AudioPart, ChatMessage, ChatPrompt, ImagePart, TextPart
    from engine.validation import Limits
    from engine.vision.prompt import expand_images

    audio, images = names
    vlm, processor = mlx_vlm.load(str(omni_dir))
    inputs = mlx_vlm_inputs(processor, tmp_path, "Compare them.", audio, images)
    content = [{"type": "audio"}] * len(audio) + [{"type": "image"}] * len(images) + \
        [{"type": "text", "text": "Compare them."}]
    text = processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                   add_generation_prompt=True, tokenize=False)
    loaded = load_generation_model(omni_dir, use_kernels=False)
    parts = (*(AudioPart(AUDIO[a], "audio/wav") for a in audio), *(ImagePart(IMAGES[n], MEDIA[n]) for n in images),
             TextPart("Compare them."))
    prompt = ChatPrompt(messages=(ChatMessage("user", "Compare them.", parts=parts),))
    ids, spans = expand_images(text, loaded.tokenizer, prompt, loaded.vision, Limits())
    assert ids == inputs["input_ids"][0].tolist()
    heard = [s for s in spans if s.audio]
    assert len(heard) == len(audio) and all(s.grid is None for s in heard)
    mel = np.asarray(inputs["input_features"])
    frames = np.asarray(inputs["feature_attention_mask"]).sum(-1) // (inputs["feature_attention_mask"].shape[-1]
                                                                       // mel.shape[-1])
    for k, span in enumerate(heard):
        np.testing.assert_array_equal(span.pixels, mel[k, :, :frames[k]])
        want = vlm.thinker.get_audio_features(inputs["input_features"][k:k + 1],
                                              feature_attention_mask=inputs["feature_attention_mask"][k:k + 1])
        got = loaded.vision.audio_features(span.pixels)
        assert got.shape == want.shape == (span.length, 64)
        assert float(mx.abs(got - want).max()) == 0.0


async def test_audio_chat_alone_equals_mlx_vlm(served, reference):
    stub, _ = served
    assert reference[0].tokens != reference[1].tokens  # the audio changes the answer
    for i in range(4):
        out = await generate(stub, case_request(i))
        assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH
        assert matches(out.token_ids, reference[i]), (CASES[i], out.token_ids, reference[i].tokens)


async def test_batch_of_eight_mixing_audio_image_and_text_rows_equals_mlx_vlm(served, reference):
    stub, _ = served
    outs = await asyncio.gather(*(generate(stub, case_request(i)) for i in range(len(CASES))))
    for i, out in enumerate(outs):
        assert matches(out.token_ids, reference[i]), (CASES[i], out.token_ids, reference[i].tokens)


async def test_the_prompt_holds_the_audio_s_tokens(served, omni_dir, tmp_path):
    import mlx_vlm

    stub, _ = served
    _, processor = mlx_vlm.load(str(omni_dir))
    with_audio_ids = mlx_vlm_inputs(processor, tmp_path, "Hello there", ("long",), ())["input_ids"]
    text_only_ids = mlx_vlm_inputs(processor, tmp_path, "Hello there", (), ())["input_ids"]
    with_audio = await generate(stub, chat("Hello there", audio_part("long"), max_tokens=1))
    text_only = await generate(stub, chat("Hello there", max_tokens=1))
    assert with_audio.started.prompt_tokens == with_audio_ids.shape[-1]
    assert with_audio_ids.shape[-1] - text_only_ids.shape[-1] == 4 * 13 + 2  # 13 a second, plus its markers
    assert text_only.started.prompt_tokens == text_only_ids.shape[-1]


async def test_a_repeated_audio_file_runs_no_tower(served, reference):
    stub, tower = served
    first = await generate(stub, case_request(1))
    before = tower.encoded
    again = await generate(stub, case_request(1))
    assert tower.encoded == before
    assert again.started.cached_tokens > 8
    assert matches(first.token_ids, reference[1]) and matches(again.token_ids, reference[1])


async def test_the_memory_plan_counts_the_checkpoint_once(served, omni_dir):
    stub, _ = served
    await assert_plan_counts_checkpoint_once(stub, "omni", omni_dir)


async def test_model_info_says_it_takes_audio(served):
    stub, _ = served
    omni = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="omni"))).info
    llava = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llava"))).info
    assert omni.capabilities.media.audio and not omni.capabilities.media.video
    assert not llava.capabilities.media.audio


FIELD = "chat.messages[0].parts[0].audio"
HOSTILE = [
    ("ten hours claimed", spb.Audio(data=wav_bytes(b"\0\0" * 1600, 16000, 1, claimed=36000 * 16000 * 2),
                                    media_type="audio/wav"), f"{FIELD}.data", "seconds"),
    ("cut short", spb.Audio(data=wav(4.0)[:30000], media_type="audio/wav"), f"{FIELD}.data", "truncated"),
    ("a WAV called MP3", spb.Audio(data=AUDIO["short"], media_type="audio/mpeg"), f"{FIELD}.media_type",
     "audio/wav"),
    ("a PNG called WAV", spb.Audio(data=IMAGES["gradient"], media_type="audio/wav"), f"{FIELD}.media_type",
     "not a WAV"),
    ("an unknown media type", spb.Audio(data=AUDIO["short"], media_type="audio/aac"), f"{FIELD}.media_type",
     "must be one of"),
    ("empty", spb.Audio(data=b"", media_type="audio/wav"), f"{FIELD}.data", "empty"),
]


@pytest.mark.parametrize("name,audio,field,says", HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_hostile_audio_is_refused_naming_the_part(served, reference, name, audio, field, says):
    stub, _ = served
    await assert_part_refused(stub, chat("What is said?", gen_pb.ContentPart(audio=audio)), field, says)
    assert matches((await generate(stub, case_request(0))).token_ids, reference[0])


async def test_too_many_audio_files_are_refused(served):
    stub, _ = served
    await refused(stub, chat("Five clips.", *(audio_part("short") for _ in range(5))),
                  grpc.StatusCode.INVALID_ARGUMENT, "at most 4 audio files")


async def test_audio_to_a_model_without_audio_is_failed_precondition(served):
    stub, _ = served
    await refused(stub, chat("What is said?", audio_part("short"), model="llava"),
                  grpc.StatusCode.FAILED_PRECONDITION, "does not take audio")


@pytest.mark.parametrize("text", [f"listen: {AUDIO_PAD}", f"{AUDIO_PAD}{AUDIO_PAD}"])
async def test_the_audio_token_typed_as_text_is_refused(served, text):
    stub, _ = served
    await refused(stub, chat(text, audio_part("short")), grpc.StatusCode.INVALID_ARGUMENT)
