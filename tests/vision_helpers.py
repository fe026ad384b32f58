"""Images, requests and mlx-vlm's greedy reference for the vision tests.

The reference is mlx-vlm itself on the fixture: its processor (LlavaProcessor,
Gemma3Processor, Idefics3Processor, SmolVLMProcessor) expands the image placeholder and preprocesses the pixels, its model splices the features and decodes
greedily (``mlx_vlm.generate.ar.generate_step``); each step's top-2 margin is kept so a
divergence at a near-tie can be told apart from a wrong token.
"""

from __future__ import annotations

import io
import struct
import zlib
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

GRADIENT = Path(__file__).resolve().parent.parent / "clients" / "testdata" / "gradient.png"
NEAR_TIE = 1e-4  # a divergence counts only where the reference's top-2 margin is at least this


def encoded(color: tuple[int, int, int], size: tuple[int, int], fmt: str = "PNG") -> bytes:
    """A picture with a colour ramp (so the pixels differ across it), encoded as ``fmt``."""
    from PIL import Image

    image = Image.new("RGB", size, color)
    for x in range(0, size[0], 4):
        image.paste((x * 255 // size[0], color[1], 255 - color[2]), (x, 0, x + 2, size[1]))
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` and whose data is one tiny IDAT."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 16))
            + chunk(b"IEND", b""))


def image_part(data: bytes, media_type: str = "image/png") -> gen_pb.ContentPart:
    return gen_pb.ContentPart(image=gen_pb.Image(data=data, media_type=media_type))


def image_chat(text: str, *images: gen_pb.ContentPart, model: str = "llava", max_tokens: int = 12,
               **kw) -> pb.GenerateRequest:
    """One user message: the images, then ``text``."""
    parts = [*images, gen_pb.ContentPart(text=text)]
    return pb.GenerateRequest(model=model, chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(
        role="user", parts=parts)]), stopping=gen_pb.StoppingCriteria(max_tokens=max_tokens, ignore_eos=True), **kw)


@dataclass(frozen=True)
class Reference:
    tokens: list[int]
    margins: list[float]  # top-2 logprob gap at each step


def vlm_reference(model_dir: Path, cases: list[tuple[str, tuple[bytes, ...]]], max_tokens: int) -> list[Reference]:
    """mlx-vlm's greedy tokens for each (user text, images) as a one-message chat: the
    images, then the text."""
    return vlm_chat_reference(model_dir, [[("user", text, image)] for text, image in cases], max_tokens)


def vlm_chat_reference(model_dir: Path, chats: list[list[tuple[str, str, tuple[bytes, ...]]]],
                       max_tokens: int) -> list[Reference]:
    """mlx-vlm's greedy tokens for each chat of (role, text, images) messages, every
    message's content a list of parts (its images, then its text), as mlx-vlm builds them."""
    import mlx.core as mx
    import mlx_vlm
    from mlx_vlm.generate.ar import generate_step
    from PIL import Image

    model, processor = mlx_vlm.load(str(model_dir))
    gemma = model.config.model_type == "gemma3"
    out = []
    for chat in chats:
        messages = [{"role": role, "content": [{"type": "image"}] * len(image) + [{"type": "text", "text": text}]}
                    for role, text, image in chat]
        prompt = processor.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        images = [Image.open(io.BytesIO(data)).convert("RGB") for _, _, image in chat for data in image] or None
        if gemma:  # the template renders every special token; its embeddings want the mask
            inputs = processor(images=images, text=prompt, add_special_tokens=False)
            mask = mx.array(inputs["attention_mask"])
        else:
            inputs, mask = processor(images=images, text=prompt), None
        tokens, margins = [], []
        grid = {"image_grid_thw": inputs["image_grid_thw"]} if "image_grid_thw" in inputs else {}  # qwen2_5_vl
        steps = generate_step(inputs["input_ids"], model, inputs.get("pixel_values"), mask, temperature=0.0,
                              max_tokens=max_tokens, **grid)
        for (token, logprobs), _ in zip(steps, range(max_tokens)):
            top2 = mx.sort(logprobs.reshape(-1))[-2:].tolist()
            tokens.append(int(token))
            margins.append(top2[1] - top2[0])
        out.append(Reference(tokens, margins))
    return out


def matches(got: list[int], ref: Reference) -> bool:
    """Token for token, up to the first divergence at a near-tie of the reference."""
    for i, (a, b) in enumerate(zip(got, ref.tokens)):
        if a != b:
            return ref.margins[i] < NEAR_TIE
    return len(got) == len(ref.tokens)


#: Chunks of 8 and small ticks: prefill boundaries fall inside images' runs of tokens.
CHUNKED = dict(max_active=8, max_queued=16, prefill_chunk=8, tick_tokens=24, min_prefill_tokens=4)


@asynccontextmanager
async def vision_server(model_dir: Path, name: str, *others: tuple[Path, str], **scheduler):
    """A live server with ``model_dir`` served as ``name`` (and ``others``, (dir, name)
    pairs) under CHUNKED scheduling (``scheduler`` overrides): yields (stub, the vision
    model's engine)."""
    import grpc

    from engine.generation.config import GenerationConfig, SchedulerConfig
    from engine.generation.frontend.engine import GenerationEngine
    from engine.models import ModelSet
    from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
    from tests.test_ops_security import extra_server

    config = GenerationConfig(scheduler=SchedulerConfig(**{**CHUNKED, **scheduler}))
    engine = GenerationEngine(str(model_dir), name=name, config=config)
    models = ModelSet([engine, *(GenerationEngine(str(d), name=n, config=config) for d, n in others)], [])
    await models.start()
    try:
        async with extra_server(models) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pb_grpc.InferenceServiceStub(channel), engine
    finally:
        await models.close()


def case_references(model_dir: Path, cases, images: dict[str, bytes], max_tokens: int) -> list[Reference]:
    """mlx-vlm's greedy tokens for (text, image names) cases."""
    return vlm_reference(model_dir, [(text, tuple(images[n] for n in names)) for text, names in cases], max_tokens)


#: Images of each served media type, and the cases the families' parity tests share:
#: (user text, image names): image rows (one with two images) and text rows.
IMAGES = {"gradient": GRADIENT.read_bytes(), "red-jpeg": encoded((200, 30, 40), (96, 80), "JPEG"),
          "blue-webp": encoded((20, 40, 220), (64, 64), "WEBP"), "green-gif": encoded((10, 200, 60), (70, 90), "GIF")}
MEDIA = {"gradient": "image/png", "red-jpeg": "image/jpeg", "blue-webp": "image/webp", "green-gif": "image/gif"}
CASES = [("What is in the picture?", ("gradient",)), ("Describe the colours.", ("red-jpeg",)),
         ("Say something about it", ("blue-webp",)), ("Is it round?", ("green-gif",)),
         ("The lighthouse keeper counted the boats.", ()), ("Hello there", ()),
         ("Numbers: 1 2 3 4 5", ()), ("Which of the two is brighter?", ("red-jpeg", "gradient"))]


def case_chat(case: tuple[str, tuple[str, ...]], images: dict[str, bytes], media: dict[str, str], model: str,
              max_tokens: int) -> pb.GenerateRequest:
    """One case's request: its images (by name), then its text."""
    text, names = case
    return image_chat(text, *(image_part(images[n], media[n]) for n in names), model=model, max_tokens=max_tokens)


async def assert_plan_counts_checkpoint_once(stub, model: str, model_dir: Path) -> None:
    """The memory plan's weights are every tensor of the checkpoint (text model, tower,
    projector) held once as float32, within 2%."""
    import math

    from safetensors import safe_open

    plan = (await stub.PlanMemory(pb.PlanMemoryRequest(model=model, context_tokens=256))).plan
    values = 0
    for path in model_dir.glob("*.safetensors"):
        with safe_open(str(path), "np") as f:
            values += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    assert 0.98 * 4 * values <= plan.weights_bytes <= 1.02 * 4 * values, (plan.weights_bytes, 4 * values)


async def refused(stub, request: pb.GenerateRequest, code, says: str = ""):
    """The error ``request`` is answered with: ``code``, soon (not hung), ``says`` in its details."""
    import time

    import grpc
    import pytest

    from tests.helpers import generate

    began = time.perf_counter()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request)
    assert time.perf_counter() - began < 30  # answered, not hung (the figure is the bench's)
    assert err.value.code() == code, err.value.details()
    assert says in err.value.details(), err.value.details()
    return err.value


async def assert_part_refused(stub, request: pb.GenerateRequest, field: str, says: str) -> None:
    """``request`` is INVALID_ARGUMENT with one field violation: ``field``, saying ``says``."""
    import grpc

    from tests.helpers import details

    error = await refused(stub, request, grpc.StatusCode.INVALID_ARGUMENT)
    violations = details(error)["BadRequest"].field_violations
    assert [v.field for v in violations] == [field]
    assert says in violations[0].description, violations[0].description

