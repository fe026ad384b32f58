"""Qwen2.5-VL and Qwen3-VL with videos, through a live server: greedy output equals mlx-vlm's own
video path (its ``load_video`` sampling from the file, its processor, its model) on the
tiny fixture, alone and inside a batch of eight mixing video, image and text rows with
prefill chunks of 8 falling inside the videos' runs; the
prompt's ids (Qwen3-VL: a "<t.t seconds>" block per pair of frames) and multi-axis
positions equal mlx-vlm's processor's and ``get_rope_index``'s with a video and an image
(mlx-vlm's qwen2_5_vl encodes either a prompt's images or its videos, not both, so a
prompt holding both is checked by its positions, not by its tokens); the frames decoded
from memory are the ones mlx-vlm's loader reads from the file; a
repeated video runs no tower; GetModelInfo says the model takes video. Hostile videos
(hours of frames claimed, frames too large, cut short, the wrong media type, too many)
are INVALID_ARGUMENT naming the part, from the header where the header says it, and the
server goes on serving; a video to a model that takes none is FAILED_PRECONDITION."""

from __future__ import annotations

import asyncio
import io

import grpc
import numpy as np
import pytest
import pytest_asyncio

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.fixtures.vision_models import build_llava
from tests.fixtures.vision_qwen import VIDEO_PAD, build_qwen2_5_vl, build_qwen3_vl
from tests.helpers import generate
from tests.video_files import avi, claiming_frames, clip, truncated
from tests.vision_helpers import (
    IMAGES,
    MEDIA,
    Reference,
    assert_part_refused,
    image_part,
    matches,
    refused,
    vision_server,
)

MAX_TOKENS = 10
VIDEOS = {"square": clip(), "slow": clip(frames=9, size=(64, 64), fps=3.0, shift=20),
          "mjpeg": avi(frames=8, size=(80, 72), fps=4.0)}
VIDEO_MEDIA = {"square": "video/mp4", "slow": "video/mp4", "mjpeg": "video/x-msvideo"}
SUFFIX = {"video/mp4": ".mp4", "video/x-msvideo": ".avi"}
# (text, video names, image names): the parts in the order videos, images, text
CASES = [("What happens in the video?", ("square",), ()), ("Describe the motion.", ("slow",), ()),
         ("Is it moving?", ("mjpeg",), ()), ("What colour is the square?", ("square",), ()),
         ("What is in the picture?", (), ("gradient",)), ("The lighthouse keeper counted the boats.", (), ()),
         ("Hello there", (), ()), ("Numbers: 1 2 3 4 5", (), ())]


def video_part(name: str) -> gen_pb.ContentPart:
    return gen_pb.ContentPart(video=gen_pb.Video(data=VIDEOS[name], media_type=VIDEO_MEDIA[name]))


def chat(text: str, *parts: gen_pb.ContentPart, model: str = "qwen", max_tokens: int = MAX_TOKENS
         ) -> pb.GenerateRequest:
    return pb.GenerateRequest(model=model, chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(
        role="user", parts=[*parts, gen_pb.ContentPart(text=text)])]),
        stopping=gen_pb.StoppingCriteria(max_tokens=max_tokens, ignore_eos=True))


def case_request(i: int) -> pb.GenerateRequest:
    text, videos, images = CASES[i]
    return chat(text, *(video_part(v) for v in videos), *(image_part(IMAGES[n], MEDIA[n]) for n in images))


def mlx_vlm_inputs(processor, tmp_path, text: str, videos: tuple[str, ...], images: tuple[str, ...]):
    """mlx-vlm's inputs for one case: the videos read from files by its own loader."""
    from mlx_vlm.utils import prepare_inputs
    from PIL import Image

    content = ([{"type": "video"}] * len(videos) + [{"type": "image"}] * len(images)
               + [{"type": "text", "text": text}])
    prompt = processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                     add_generation_prompt=True, tokenize=False)
    paths = []
    for name in videos:
        path = tmp_path / f"{name}{SUFFIX[VIDEO_MEDIA[name]]}"
        path.write_bytes(VIDEOS[name])
        paths.append(str(path))
    pictures = [Image.open(io.BytesIO(IMAGES[n])).convert("RGB") for n in images] or None
    return prepare_inputs(processor, images=pictures, videos=paths or None, prompts=prompt)


BUILD = {"qwen2_5_vl": build_qwen2_5_vl, "qwen3_vl": build_qwen3_vl}


@pytest.fixture(scope="module", params=list(BUILD))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory, family):
    return BUILD[family](tmp_path_factory.mktemp(f"video-{family}") / "qwen")


@pytest.fixture(scope="module")
def reference(qwen_dir, tmp_path_factory):
    """mlx-vlm's greedy tokens per case, computed before the module's server starts."""
    import mlx.core as mx
    import mlx_vlm
    from mlx_vlm.generate.ar import generate_step

    model, processor = mlx_vlm.load(str(qwen_dir))
    tmp = tmp_path_factory.mktemp("video-files")
    out = []
    for text, videos, images in CASES:
        inputs = mlx_vlm_inputs(processor, tmp, text, videos, images)
        extra = {k: inputs[k] for k in ("pixel_values_videos", "video_grid_thw", "image_grid_thw") if k in inputs}
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
async def served(qwen_dir, reference, tmp_path_factory):
    llava = build_llava(tmp_path_factory.mktemp("video-llava") / "llava")
    async with vision_server(qwen_dir, "qwen", (llava, "llava")) as (stub, engine):
        yield stub, engine.loaded.vision


@pytest.mark.parametrize("names", [(("square",), ("green-gif",)), (("mjpeg", "slow"), ())])
def test_video_ids_and_positions_are_mlx_vlms(qwen_dir, tmp_path, names):
    """Videos (and an image) between text: the prompt's ids, [3, L] positions and shift
    equal mlx-vlm's processor's ids and get_rope_index on its grids."""
    import mlx.core as mx
    import mlx_vlm

    from engine.loading.model import load_generation_model
    from engine.requests import ChatMessage, ChatPrompt, ImagePart, TextPart, VideoPart
    from engine.validation import Limits
    from engine.vision.mrope import prompt_positions
    from engine.vision.prompt import expand_images

    videos, images = names
    vlm, processor = mlx_vlm.load(str(qwen_dir))
    inputs = mlx_vlm_inputs(processor, tmp_path, "Compare them.", videos, images)
    want, delta = vlm.language_model.get_rope_index(inputs["input_ids"], inputs.get("image_grid_thw"),
                                                    inputs["video_grid_thw"])
    content = [{"type": "video"}] * len(videos) + [{"type": "image"}] * len(images) + \
        [{"type": "text", "text": "Compare them."}]
    text = processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                   add_generation_prompt=True, tokenize=False)
    loaded = load_generation_model(qwen_dir, use_kernels=False)
    parts = (*(VideoPart(VIDEOS[v], VIDEO_MEDIA[v]) for v in videos), *(ImagePart(IMAGES[n], MEDIA[n]) for n in images),
             TextPart("Compare them."))
    prompt = ChatPrompt(messages=(ChatMessage("user", "Compare them.", parts=parts),))
    ids, spans = expand_images(text, loaded.tokenizer, prompt, loaded.vision, Limits())
    assert ids == inputs["input_ids"][0].tolist()
    assert spans[0].grid[0] > 1  # the video's frames make more than one time step
    got, shift = prompt_positions(len(ids), spans)
    np.testing.assert_array_equal(got, np.array(want[:, 0, :]))
    assert shift == int(mx.array(delta).item())


def test_frames_are_mlx_vlms(qwen_dir, tmp_path):
    """The frames decoded from memory are the ones mlx-vlm's load_video reads from the file."""
    from mlx_vlm.utils import load_video

    from engine.loading.model import load_generation_model
    from engine.requests import VideoPart
    from engine.validation import Limits
    from engine.vision.video import decode

    tower = load_generation_model(qwen_dir, use_kernels=False).vision
    assert tower is not None
    assert tower.video is not None
    for name in VIDEOS:
        path = tmp_path / f"{name}{SUFFIX[VIDEO_MEDIA[name]]}"
        path.write_bytes(VIDEOS[name])
        from mlx_vlm.utils import VideoSampling
        s = tower.video.sampling
        want, _ = load_video(str(path), VideoSampling(fps=s.fps, min_frames=s.min_frames, max_frames=s.max_frames,
                                                      frame_factor=s.frame_factor))
        got, times = decode("v", VideoPart(VIDEOS[name], VIDEO_MEDIA[name]), Limits(), s)
        np.testing.assert_array_equal(got, want)
        assert len(times) == len(got) and times[0] == 0 and all(np.diff(times) > 0)


async def test_video_chat_alone_equals_mlx_vlm(served, reference):
    stub, _ = served
    assert reference[0].tokens != reference[1].tokens  # the video changes the answer
    for i in range(4):
        out = await generate(stub, case_request(i))
        assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH
        assert matches(out.token_ids, reference[i]), (CASES[i], out.token_ids, reference[i].tokens)


async def test_batch_of_eight_mixing_video_image_and_text_rows_equals_mlx_vlm(served, reference):
    stub, _ = served
    outs = await asyncio.gather(*(generate(stub, case_request(i)) for i in range(len(CASES))))
    for i, out in enumerate(outs):
        assert matches(out.token_ids, reference[i]), (CASES[i], out.token_ids, reference[i].tokens)


async def test_the_prompt_holds_the_video_s_tokens(served, qwen_dir, tmp_path):
    import mlx_vlm

    stub, _ = served
    _, processor = mlx_vlm.load(str(qwen_dir))
    with_video_ids = mlx_vlm_inputs(processor, tmp_path, "Hello there", ("square",), ())["input_ids"]
    text_only_ids = mlx_vlm_inputs(processor, tmp_path, "Hello there", (), ())["input_ids"]
    with_video = await generate(stub, chat("Hello there", video_part("square"), max_tokens=1))
    text_only = await generate(stub, chat("Hello there", max_tokens=1))
    assert with_video.started.prompt_tokens == with_video_ids.shape[-1]
    assert text_only.started.prompt_tokens == text_only_ids.shape[-1] < with_video_ids.shape[-1]


async def test_a_repeated_video_runs_no_tower(served, reference):
    stub, tower = served
    first = await generate(stub, case_request(1))
    before = tower.encoded
    again = await generate(stub, case_request(1))
    assert tower.encoded == before
    assert again.started.cached_tokens > 8
    assert matches(first.token_ids, reference[1]) and matches(again.token_ids, reference[1])


async def test_model_info_says_it_takes_video(served):
    stub, _ = served
    qwen = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="qwen"))).info
    llava = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llava"))).info
    assert qwen.capabilities.media.video and not llava.capabilities.media.video


FIELD = "chat.messages[0].parts[0].video"
HOSTILE = [
    ("100k frames claimed", gen_pb.Video(data=claiming_frames(avi(), 100_000), media_type="video/x-msvideo"),
     f"{FIELD}.data", "seconds"),
    ("8000x8000 frames", gen_pb.Video(data=avi(frames=2, size=(8000, 8000)), media_type="video/x-msvideo"),
     f"{FIELD}.data", "pixels"),
    ("cut short", gen_pb.Video(data=truncated(avi(frames=8, size=(80, 72))), media_type="video/x-msvideo"),
     f"{FIELD}.data", "truncated"),
    ("an MP4 called WebM", gen_pb.Video(data=VIDEOS["square"], media_type="video/webm"), f"{FIELD}.media_type",
     "video/mp4"),
    ("a PNG called MP4", gen_pb.Video(data=IMAGES["gradient"], media_type="video/mp4"), f"{FIELD}.media_type",
     "not an MP4"),
    ("an unknown media type", gen_pb.Video(data=VIDEOS["square"], media_type="video/ogg"), f"{FIELD}.media_type",
     "must be one of"),
    ("empty", gen_pb.Video(data=b"", media_type="video/mp4"), f"{FIELD}.data", "empty"),
]


@pytest.mark.parametrize("name,video,field,says", HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_hostile_videos_are_refused_naming_the_part(served, reference, name, video, field, says):
    stub, _ = served
    await assert_part_refused(stub, chat("What happens?", gen_pb.ContentPart(video=video)), field, says)
    assert matches((await generate(stub, case_request(0))).token_ids, reference[0])


async def test_too_many_videos_are_refused(served):
    stub, _ = served
    await refused(stub, chat("Five clips.", *(video_part("square") for _ in range(5))),
                  grpc.StatusCode.INVALID_ARGUMENT, "at most 4 videos")


async def test_a_video_to_a_model_without_video_is_failed_precondition(served):
    stub, _ = served
    await refused(stub, chat("What happens?", video_part("square"), model="llava"),
                  grpc.StatusCode.FAILED_PRECONDITION, "does not take videos")


@pytest.mark.parametrize("text", [f"look: {VIDEO_PAD}", f"{VIDEO_PAD}{VIDEO_PAD}"])
async def test_the_video_token_typed_as_text_is_refused(served, text):
    stub, _ = served
    await refused(stub, chat(text, video_part("square")), grpc.StatusCode.INVALID_ARGUMENT)
