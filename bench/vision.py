"""Images in the prompt: our server vs mlx-vlm on the same LLaVA model, in one run.

    .venv/bin/python -m bench.vision --markdown    # real-sized random LLaVA, ~5 min here
    .venv/bin/python -m bench.vision --quick       # the tests' tiny LLaVA, 2 requests (CI smoke)
    .venv/bin/python -m bench.vision --model DIR   # any llava directory
    .venv/bin/python -m bench.vision --video ...   # videos on Qwen2.5-VL (bench/video.py)

Two figures, both measured on the same model in the same run:

* **Throughput.** ``--requests`` chat requests, one distinct 512x512 PNG each, sent at
  once to our server (``python -m service serve``, grpc.aio through the generated
  stubs), vs mlx-vlm's own generation (its processor and ``generate_step``, as the
  tests' oracle drives it) run one request after another in this process. Aggregate
  tok/s = all generated tokens / wall time, image decoding and preprocessing included
  on both sides. Greedy, ``--tokens`` per request on both sides (ours ``ignore_eos``,
  mlx-vlm's EOS masked by a logit bias); our requests bypass the prefix cache.
* **A repeated image.** A request with a fresh image, then one with the same image and
  the same prompt prefix but another question after it: the second one's TTFT over the
  first's (our prefix cache keys image positions by a digest of the image bytes).

No real vision-language weights are available offline, so the default model is built
once under ``$MLX_GRPC_CACHE/bench`` (tests/fixtures/vision_models.py with sizes): a
CLIP-ViT-B/16-shaped tower at 224 px (196 image tokens) and a SmolLM2-135M-shaped llama
(30 layers, hidden 576, vocabulary 49,152), random weights in float32. The generated
text is meaningless; the timings are real. Sides alternate inside each repetition;
figures are median [min-max].
"""

from __future__ import annotations

if __package__ in (None, ""):
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import argparse
import asyncio
import io
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import engine  # noqa: F401  - BLAS before mlx

from .common import Sample, machine_facts, ratio, rotated, version
from .report import Report, Row
from .run import log
from .servers import OurServer

IMAGE_SIDE = 512
PREFIX = "Look at this picture carefully before you answer. Question: "
QUESTIONS = ["What is in the picture?", "Which colours dominate it?", "Is there a person in it?",
             "Where could it have been taken?", "What time of day is it?", "Describe its left half.",
             "Is it a photograph or a drawing?", "What stands out most?"]
THROUGHPUT_GOAL, REPEAT_GOAL = 1.5, 0.3
# The default model: SmolLM2-135M's text shapes under a CLIP-ViT-B/16 tower at 224 px.
MODEL_NAME = "llava-clip-b16-224-smollm2-135m-random"
TEXT_SHAPES = dict(model_type="llama", hidden_size=576, num_hidden_layers=30, intermediate_size=1536,
                   num_attention_heads=9, num_key_value_heads=3, head_dim=64, tie_word_embeddings=True,
                   extra_config={"rope_theta": 100000.0})
VISION_SHAPES = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                     image_size=224, patch_size=16, projection_dim=512)
VOCAB = 49152


# -- the model and the images -----------------------------------------------------------------

def bench_model() -> Path:
    """The real-sized random LLaVA, built once under the model cache."""
    from engine.loading.model import cache_root
    from tests.fixtures.models import ModelSpec
    from tests.fixtures.vision_models import build_llava

    target = cache_root() / "bench" / MODEL_NAME
    if (target / "preprocessor_config.json").is_file():
        return target
    log(f"building {target} (random weights, once)")
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    build_llava(tmp, text=ModelSpec(**TEXT_SHAPES), vision=VISION_SHAPES, vocab_size=VOCAB)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def picture(seed: int, side: int = IMAGE_SIDE) -> bytes:
    """A distinct PNG per seed: smooth colour waves plus a few rectangles."""
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side] / side
    channels = [127 + 120 * np.sin(2 * np.pi * (rng.uniform(0.5, 3) * x + rng.uniform(0.5, 3) * y + rng.uniform()))
                for _ in range(3)]
    image = Image.fromarray(np.stack(channels, -1).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x0, y0 = rng.integers(0, side - 64, 2)
        w, h = rng.integers(16, 160, 2)
        draw.rectangle((int(x0), int(y0), int(x0 + w), int(y0 + h)), fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


# -- the two sides ----------------------------------------------------------------------------

@dataclass
class Result:
    ttft: float  # seconds from sending (ours) or from starting the request (mlx-vlm)
    tokens: int
    prompt_tokens: int = 0
    cached_tokens: int = 0


async def ours(server: OurServer, image: bytes, question: str, tokens: int, bypass: bool) -> Result:
    from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
    from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

    parts = [gen_pb.ContentPart(image=gen_pb.Image(data=image, media_type="image/png")),
             gen_pb.ContentPart(text=PREFIX + question)]
    req = pb.GenerateRequest(model="bench", bypass_prefix_cache=bypass,
                             chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", parts=parts)]),
                             stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))
    sent, first, r = time.perf_counter(), 0.0, Result(0.0, 0)
    async for resp in server.stub.Generate(req):
        kind = resp.WhichOneof("event")
        if kind == "started":
            r.prompt_tokens, r.cached_tokens = resp.started.prompt_tokens, resp.started.cached_tokens
        elif kind == "delta" and resp.delta.token_ids:
            first = first or time.perf_counter()
            r.tokens += len(resp.delta.token_ids)
    r.ttft = first - sent
    return r


class MlxVlm:
    """mlx-vlm on the same directory, driven as the tests' oracle drives it: its
    processor expands the placeholder and preprocesses the pixels, ``generate_step``
    decodes greedily with EOS masked."""

    def __init__(self, model_dir: Path):
        import mlx_vlm

        self.model, self.processor = mlx_vlm.load(str(model_dir))
        eos = self.processor.tokenizer.eos_token_id
        self.no_eos = {int(i): -1e9 for i in (eos if isinstance(eos, list) else [eos])}

    def run(self, image: bytes, question: str, tokens: int) -> Result:
        import mlx.core as mx
        from mlx_vlm.generate.ar import generate_step
        from PIL import Image

        start = time.perf_counter()
        content = [{"type": "image"}, {"type": "text", "text": PREFIX + question}]
        prompt = self.processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                              add_generation_prompt=True, tokenize=False)
        inputs = self.processor(images=[Image.open(io.BytesIO(image)).convert("RGB")], text=prompt)
        steps = generate_step(inputs["input_ids"], self.model, inputs["pixel_values"], None, temperature=0.0,
                              max_tokens=tokens, logit_bias=self.no_eos)
        r, first = Result(0.0, 0, prompt_tokens=int(inputs["input_ids"].shape[-1])), 0.0
        for (token, _), _ in zip(steps, range(tokens)):
            mx.eval(token)
            first = first or time.perf_counter()
            r.tokens += 1
        r.ttft = first - start
        return r


# -- the measurements -------------------------------------------------------------------------

async def throughput(server: OurServer, anchor: MlxVlm, args, rep: int, side: str) -> tuple[float, list[Result]]:
    """(aggregate tok/s, per-request results) for one side, images distinct per rep and side."""
    base = 1000 * (rep + 1) + (0 if side == "ours" else 500)
    images = [picture(base + i) for i in range(args.requests)]
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.requests)]
    start = time.perf_counter()
    if side == "ours":
        results = await asyncio.gather(*(ours(server, img, q, args.tokens, bypass=True)
                                         for img, q in zip(images, questions)))
    else:
        results = [anchor.run(img, q, args.tokens) for img, q in zip(images, questions)]
    elapsed = time.perf_counter() - start
    if any(r.tokens != args.tokens for r in results):
        raise RuntimeError(f"{side}: a request generated {[r.tokens for r in results]} tokens, not {args.tokens}")
    return sum(r.tokens for r in results) / elapsed, list(results)


async def repeated_image(server: OurServer, args, rep: int) -> tuple[Result, Result]:
    """(first time, repeat) for a fresh image: same prefix, another question after it."""
    image = picture(90_000 + rep)
    first = await ours(server, image, QUESTIONS[0], args.tokens, bypass=False)
    again = await ours(server, image, QUESTIONS[1], args.tokens, bypass=False)
    return first, again


async def measure(args, model_dir: Path, log_dir: Path, report: Report) -> None:
    log("loading mlx-vlm's side")
    anchor = MlxVlm(model_dir)
    server = OurServer(model_dir, None, log_dir, max_active=max(8, args.requests))
    try:
        await server.start()
        log("warm-up on both sides")
        await ours(server, picture(7), QUESTIONS[0], 4, bypass=True)
        anchor.run(picture(7), QUESTIONS[0], 4)
        rates = {"ours": Sample(), "mlx-vlm": Sample()}
        per_request: dict[str, list[Result]] = {"ours": [], "mlx-vlm": []}
        first, again, cached = Sample(), Sample(), []
        for rep in range(args.reps):
            for side in rotated(["ours", "mlx-vlm"], rep):
                rate, results = await throughput(server, anchor, args, rep, side)
                rates[side].add(rate)
                per_request[side] += results
            a, b = await repeated_image(server, args, rep)
            first.add(a.ttft)
            again.add(b.ttft)
            cached.append((b.cached_tokens, b.prompt_tokens))
            log(f"rep {rep + 1}/{args.reps}: {args.requests} requests ours {rates['ours'].values[-1]:.1f}, "
                f"mlx-vlm {rates['mlx-vlm'].values[-1]:.1f} tok/s; repeated image TTFT "
                f"{b.ttft * 1e3:.0f} ms vs first {a.ttft * 1e3:.0f} ms ({b.cached_tokens}/{b.prompt_tokens} cached)")
    finally:
        await server.close()
    o, m = rates["ours"], rates["mlx-vlm"]
    prompt = {s: sorted(r.prompt_tokens for r in per_request[s]) for s in per_request}
    same = "the same on both sides" if prompt["ours"] == prompt["mlx-vlm"] else \
        f"mlx-vlm {prompt['mlx-vlm'][0]}-{prompt['mlx-vlm'][-1]}"
    report.facts["load average at end"] = "%.2f %.2f %.2f" % os.getloadavg()
    t = report.table(f"{args.requests} requests, one {IMAGE_SIDE}x{IMAGE_SIDE} PNG each, {args.tokens} tokens each",
                     "ours", "mlx-vlm")
    per_rep = ", ".join(ratio(a, b) for a, b in zip(o.values, m.values))
    t.append(Row("aggregate tok/s", o.fmt(), m.fmt(), ratio(o.median, m.median),
                 f"ours concurrent via gRPC; mlx-vlm one after another; prompt tokens "
                 f"{prompt['ours'][0]}-{prompt['ours'][-1]}, {same}; ratio per repetition {per_rep}"))
    alone = Sample([r.ttft for r in per_request["mlx-vlm"]])
    t.append(Row("TTFT ms, an image seen for the first time", first.fmt(0, 1e3), alone.fmt(0, 1e3),
                 ratio(first.median, alone.median), "ours: the repeat table's first request, alone; "
                 "mlx-vlm: each request alone; lower is better"))
    t = report.table("the same image again (same prompt prefix, another question after it)", "repeat", "first time")
    t.append(Row("TTFT ms", again.fmt(0, 1e3), first.fmt(0, 1e3), ratio(again.median, first.median),
                 f"ours, lower is better; ratio per repetition "
                 f"{', '.join(ratio(a, b) for a, b in zip(again.values, first.values))}; cached/prompt tokens: "
                 f"{', '.join(sorted({f'{c}/{p}' for c, p in cached}))}"))
    goals = report.table("goals (ratios from this run)", "measured", "goal")
    for name, a, b, target, higher in (
            (f"{args.requests} requests aggregate vs mlx-vlm one after another", o.median, m.median,
             THROUGHPUT_GOAL, True),
            ("TTFT of a repeated image vs its first time (lower)", again.median, first.median, REPEAT_GOAL, False)):
        if a and b:
            met = a / b >= target if higher else a / b <= target
            goals.append(Row(name, f"{a / b:.2f}x", f"{'>=' if higher else '<='} {target}x",
                             "met" if met else "missed"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--video" in argv:  # videos: bench/video.py
        from .video import main as video_main

        return video_main([a for a in argv if a != "--video"])
    p = argparse.ArgumentParser(prog="python -m bench.vision", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a llava directory (default: the real-sized random one, built once)")
    p.add_argument("--requests", type=int, default=8, help="concurrent requests (one image each)")
    p.add_argument("--tokens", type=int, default=32, help="tokens generated per request")
    p.add_argument("--reps", type=int, default=3, help="repetitions (sides alternate inside each)")
    p.add_argument("--quick", action="store_true", help="the tests' tiny LLaVA, 2 requests, 8 tokens, 1 repetition")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.tokens, args.reps = 2, 8, 1
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-vision-") as tmp:
        if args.model:
            model_dir, described = Path(args.model), args.model
        elif args.quick:
            from tests.fixtures.vision_models import build_llava

            model_dir = build_llava(Path(tmp) / "llava")
            described = "the tests' tiny LLaVA (64 px tower): a harness check, the figures mean nothing"
        else:
            model_dir = bench_model()
            described = (f"{model_dir.name}: CLIP-ViT-B/16-shaped tower at 224 px (196 image tokens), "
                         "SmolLM2-135M-shaped llama (30 layers, hidden 576, vocabulary 49152), float32")
        report = Report()
        report.facts.update(machine_facts())
        report.facts.update({
            "mlx-vlm": version("mlx-vlm"), "model": described,
            "weights": "random: the generated text is meaningless, the timings are real" if not args.model else "as given",
            "requests": f"{args.requests} x one {IMAGE_SIDE}x{IMAGE_SIDE} PNG (distinct per request), "
                        f"{args.tokens} tokens each, greedy"})
        asyncio.run(measure(args, model_dir, Path(tmp), report))
    command = "python -m bench.vision " + " ".join(argv)
    report.publish(command, started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
