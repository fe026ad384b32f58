"""Videos in the prompt: our server vs mlx-vlm on the same Qwen2.5-VL-shaped model, in one run.

    .venv/bin/python -m bench.video --markdown              # Qwen2.5-VL-3B's shapes, 8 frames of 448x448
    .venv/bin/python -m bench.video --size tower-0.5b       # its tower over a Qwen2.5-0.5B-shaped text model
    .venv/bin/python -m bench.video --quick                 # the tests' tiny Qwen2.5-VL (CI smoke)
    (also ``python -m bench.vision --video ...``)

Three figures, measured on the same model in the same run:

* **Throughput.** ``--requests`` chat requests, one distinct MP4 each (``--frames``
  frames sampled at 2 per second, ``--side`` pixels square), sent at once to our server
  (grpc.aio through the generated stubs) vs mlx-vlm's own video path (its ``load_video``
  from a file, its processor, ``generate_step``) one request after another in this
  process. Aggregate tok/s = generated tokens / wall time, decoding and preprocessing
  included on both sides; greedy, ``--tokens`` each (ours ``ignore_eos``, mlx-vlm's EOS
  masked); our requests bypass the prefix cache. Sides alternate in each repetition.
* **A repeated video.** A fresh video, then the same video and prompt prefix with another
  question: the second TTFT over the first (the encoded video and the prefix cache).
* **Hostile videos.** A header claiming 100,000 frames, 8000 x 8000 frames, a file cut
  short: each refused INVALID_ARGUMENT naming the part; the time to the refusal.

No real weights are available offline: the model is built once under
``$MLX_GRPC_CACHE/bench`` with random float32 weights (the text is meaningless, the
timings real), and both sides load it; the server is started and closed per repetition
where the two copies would not fit in memory together (``--size 3b``).
"""

from __future__ import annotations

if __package__ in (None, ""):
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import argparse
import asyncio
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

PREFIX = "Watch this video carefully before you answer. Question: "
QUESTIONS = ["What happens in the video?", "Which colours dominate it?", "Does anything move?",
             "Where could it have been filmed?", "What is in the first frame?", "Describe its left half.",
             "Is it a film or an animation?", "What stands out most?"]
THROUGHPUT_GOAL, REPEAT_GOAL = 1.5, 0.3
# Qwen2.5-VL-3B-Instruct's tower (32 blocks of 1280, windows of 112 px, full attention in
# blocks 7, 15, 23, 31) and text model (qwen2: 36 layers of 2048, 16/2 heads, MLP 11008)
TOWER_3B = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                window_size=112, fullatt_block_indexes=[7, 15, 23, 31])
SIZES = {
    "3b": ("Qwen2.5-VL-3B", TOWER_3B,
           dict(hidden_size=2048, num_hidden_layers=36, intermediate_size=11008, num_attention_heads=16,
                num_key_value_heads=2, head_dim=128, tie_word_embeddings=True), [16, 24, 24]),
    "tower-0.5b": ("Qwen2.5-VL-3B's tower over Qwen2.5-0.5B's text shape", {**TOWER_3B, "out_hidden_size": 896},
                   dict(hidden_size=896, num_hidden_layers=24, intermediate_size=4864, num_attention_heads=14,
                        num_key_value_heads=2, head_dim=64, tie_word_embeddings=True), [8, 12, 12]),
}
VOCAB = 151936


def bench_model(size: str) -> Path:
    from engine.loading.model import cache_root
    from tests.fixtures.models import ModelSpec
    from tests.fixtures.vision_qwen import build_qwen2_5_vl

    _, tower, text, sections = SIZES[size]
    target = cache_root() / "bench" / f"qwen2_5_vl-{size}-random"
    if (target / "preprocessor_config.json").is_file():
        return _real_pixels(target)
    log(f"building {target} (random weights, once)")
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    build_qwen2_5_vl(tmp, text=ModelSpec(model_type="llama", extra_config={"rope_theta": 1e6}, **text),
                     vision=tower, vocab_size=VOCAB, sections=sections)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return _real_pixels(target)


def _real_pixels(target: Path) -> Path:
    """Qwen2.5-VL's own pixel bounds in the processor files (min 56 x 56, max 12,845,056: for a
    video the bound of all its frames together), so 8 frames of 448 x 448 keep their size."""
    import json

    path = target / "preprocessor_config.json"
    config = json.loads(path.read_text())
    if (config.get("min_pixels"), config.get("max_pixels")) != (3136, 12845056):
        path.write_text(json.dumps({**config, "min_pixels": 3136, "max_pixels": 12845056}, indent=2))
    return target


def video(seed: int, frames: int, side: int) -> bytes:
    """A distinct MP4 per seed: ``frames`` x 2 source frames at 4 fps, so that sampling at 2
    per second keeps ``frames``."""
    from tests.video_files import clip

    return clip(frames=frames * 2, size=(side, side), fps=4.0, shift=seed * 7)


@dataclass
class Result:
    ttft: float
    tokens: int
    prompt_tokens: int = 0
    cached_tokens: int = 0


async def ours(server: OurServer, data: bytes, question: str, tokens: int, bypass: bool) -> Result:
    from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
    from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

    parts = [gen_pb.ContentPart(video=gen_pb.Video(data=data, media_type="video/mp4")),
             gen_pb.ContentPart(text=PREFIX + question)]
    req = pb.GenerateRequest(model="bench", bypass_prefix_cache=bypass,
                             chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", parts=parts)]),
                             stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))
    sent, first, r = time.perf_counter(), 0.0, Result(0.0, 0)
    async for resp in server.stub.Generate(req, timeout=3600):
        kind = resp.WhichOneof("event")
        if kind == "started":
            r.prompt_tokens, r.cached_tokens = resp.started.prompt_tokens, resp.started.cached_tokens
        elif kind == "delta" and resp.delta.token_ids:
            first = first or time.perf_counter()
            r.tokens += len(resp.delta.token_ids)
    r.ttft = first - sent
    return r


class MlxVlm:
    """mlx-vlm's own video path on the same directory: ``prepare_inputs`` reads the file
    with its ``load_video``, ``generate_step`` decodes greedily with EOS masked."""

    def __init__(self, model_dir: Path, tmp: Path):
        import mlx_vlm

        self.model, self.processor = mlx_vlm.load(str(model_dir))
        eos = self.processor.tokenizer.eos_token_id
        self.no_eos = {int(i): -1e9 for i in (eos if isinstance(eos, list) else [eos])}
        self.tmp = tmp

    def run(self, data: bytes, question: str, tokens: int) -> Result:
        import mlx.core as mx
        from mlx_vlm.generate.ar import generate_step
        from mlx_vlm.utils import prepare_inputs

        start = time.perf_counter()
        path = self.tmp / f"{start}.mp4"
        path.write_bytes(data)
        content = [{"type": "video"}, {"type": "text", "text": PREFIX + question}]
        prompt = self.processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                              add_generation_prompt=True, tokenize=False)
        inputs = prepare_inputs(self.processor, videos=[str(path)], prompts=prompt)
        steps = generate_step(inputs["input_ids"], self.model, None, None, temperature=0.0, max_tokens=tokens,
                              logit_bias=self.no_eos, pixel_values_videos=inputs["pixel_values_videos"],
                              video_grid_thw=inputs["video_grid_thw"])
        r, first = Result(0.0, 0, prompt_tokens=int(inputs["input_ids"].shape[-1])), 0.0
        for (token, _), _ in zip(steps, range(tokens)):
            mx.eval(token)
            first = first or time.perf_counter()
            r.tokens += 1
        r.ttft = first - start
        path.unlink()
        return r

    def close(self) -> None:
        import gc

        import mlx.core as mx

        self.model = None
        gc.collect()
        mx.clear_cache()


async def hostile(server: OurServer) -> list[tuple[str, float, str]]:
    """(what, seconds to the refusal, status and field) for each hostile file."""
    import grpc

    from tests.video_files import avi, claiming_frames, truncated

    out = []
    for what, data in (("a header claiming 100,000 frames", claiming_frames(avi(), 100_000)),
                       ("8000 x 8000 frames", avi(frames=2, size=(8000, 8000))),
                       ("an AVI cut at 90%", truncated(avi(frames=8, size=(448, 448))))):
        from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
        from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

        parts = [gen_pb.ContentPart(video=gen_pb.Video(data=data, media_type="video/x-msvideo")),
                 gen_pb.ContentPart(text="What happens?")]
        req = pb.GenerateRequest(model="bench", chat=gen_pb.ChatMessages(messages=[
            gen_pb.ChatMessage(role="user", parts=parts)]), stopping=gen_pb.StoppingCriteria(max_tokens=4))
        start = time.perf_counter()
        try:
            async for _ in server.stub.Generate(req):
                pass
            out.append((what, time.perf_counter() - start, "SERVED (wrong)"))
        except grpc.aio.AioRpcError as e:
            out.append((what, time.perf_counter() - start, f"{e.code().name}: {e.details()[:90]}"))
    return out


async def measure(args, model_dir: Path, tmp: Path, report: Report) -> None:
    rates = {"ours": Sample(), "mlx-vlm": Sample()}
    per_request: dict[str, list[Result]] = {"ours": [], "mlx-vlm": []}
    first, again, cached, refused = Sample(), Sample(), [], []
    anchor: MlxVlm | None = None
    for rep in range(args.reps):
        for side in rotated(["ours", "mlx-vlm"], rep):
            base = 1000 * (rep + 1) + (0 if side == "ours" else 500)
            videos = [video(base + i, args.frames, args.side) for i in range(args.requests)]
            questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.requests)]
            if side == "mlx-vlm":
                if anchor is None:
                    log("loading mlx-vlm's side")
                    anchor = MlxVlm(model_dir, tmp)
                    anchor.run(video(7, args.frames, args.side), QUESTIONS[0], 2)  # warm-up
                start = time.perf_counter()
                results = [anchor.run(v, q, args.tokens) for v, q in zip(videos, questions)]
                elapsed = time.perf_counter() - start
                if args.apart:
                    anchor.close()
                    anchor = None
            else:
                server = OurServer(model_dir, None, tmp, max_active=max(8, args.requests))
                try:
                    await server.start(timeout=1800)
                    await ours(server, video(7, args.frames, args.side), QUESTIONS[0], 2, bypass=True)  # warm-up
                    start = time.perf_counter()
                    results = list(await asyncio.gather(*(ours(server, v, q, args.tokens, bypass=True)
                                                          for v, q in zip(videos, questions))))
                    elapsed = time.perf_counter() - start
                    seen = video(90_000 + rep, args.frames, args.side)
                    a = await ours(server, seen, QUESTIONS[0], args.tokens, bypass=False)
                    b = await ours(server, seen, QUESTIONS[1], args.tokens, bypass=False)
                    first.add(a.ttft)
                    again.add(b.ttft)
                    cached.append((b.cached_tokens, b.prompt_tokens))
                    if rep == 0:
                        refused = await hostile(server)
                finally:
                    await server.close()
            if any(r.tokens != args.tokens for r in results):
                raise RuntimeError(f"{side}: generated {[r.tokens for r in results]} tokens, not {args.tokens}")
            rates[side].add(sum(r.tokens for r in results) / elapsed)
            per_request[side] += results
            log(f"rep {rep + 1}/{args.reps} {side}: {rates[side].values[-1]:.2f} tok/s, "
                f"prompt tokens {results[0].prompt_tokens}, TTFT {min(r.ttft for r in results):.1f}-"
                f"{max(r.ttft for r in results):.1f} s")
    if anchor is not None:
        anchor.close()
    o, m = rates["ours"], rates["mlx-vlm"]
    prompt = {s: sorted(r.prompt_tokens for r in per_request[s]) for s in per_request}
    same = "the same on both sides" if prompt["ours"] == prompt["mlx-vlm"] else \
        f"mlx-vlm {prompt['mlx-vlm'][0]}-{prompt['mlx-vlm'][-1]}"
    t = report.table(f"{args.requests} requests, one {args.frames}-frame {args.side}x{args.side} MP4 each, "
                     f"{args.tokens} tokens each", "ours", "mlx-vlm")
    t.append(Row("aggregate tok/s", o.fmt(2), m.fmt(2), ratio(o.median, m.median),
                 f"ours concurrent via gRPC; mlx-vlm one after another; prompt tokens {prompt['ours'][0]}-"
                 f"{prompt['ours'][-1]}, {same}"))
    alone = Sample([r.ttft for r in per_request["mlx-vlm"]])
    t.append(Row("TTFT s, a video seen for the first time", first.fmt(2), alone.fmt(2),
                 ratio(first.median, alone.median), "ours alone (the repeat table's first); mlx-vlm each request"))
    t = report.table("the same video again (same prompt prefix, another question after it)", "repeat", "first time")
    t.append(Row("TTFT ms", again.fmt(0, 1e3), first.fmt(0, 1e3), ratio(again.median, first.median),
                 f"ours, lower is better; cached/prompt tokens {', '.join(sorted({f'{c}/{p}' for c, p in cached}))}"))
    t = report.table("hostile videos (refused from the header where it says enough)", "ms", "answer")
    for what, seconds, answer in refused:
        t.append(Row(what, f"{seconds * 1e3:.1f}", answer))
    goals = report.table("goals (ratios from this run)", "measured", "goal")
    for name, a, b, target, higher in (
            (f"{args.requests} video requests aggregate vs mlx-vlm one after another", o.median, m.median,
             THROUGHPUT_GOAL, True),
            ("TTFT of a repeated video vs its first time (lower)", again.median, first.median, REPEAT_GOAL, False)):
        if a and b:
            met = a / b >= target if higher else a / b <= target
            goals.append(Row(name, f"{a / b:.2f}x", f"{'>=' if higher else '<='} {target}x",
                             "met" if met else "missed"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.video", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=list(SIZES), default="3b", help="the random model's shapes")
    p.add_argument("--model", help="a qwen2_5_vl directory instead of a random one")
    p.add_argument("--requests", type=int, default=8, help="concurrent requests (one video each)")
    p.add_argument("--frames", type=int, default=8, help="frames sampled from each video")
    p.add_argument("--side", type=int, default=448, help="frame side in pixels")
    p.add_argument("--tokens", type=int, default=32, help="tokens generated per request")
    p.add_argument("--reps", type=int, default=1, help="repetitions (sides alternate inside each)")
    p.add_argument("--quick", action="store_true", help="the tests' tiny Qwen2.5-VL, 2 requests, 1 repetition")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.tokens, args.reps, args.side = 2, 8, 1, 96
    args.apart = args.size == "3b" and not args.quick and not args.model  # two float32 copies do not fit
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-video-") as tmp:
        if args.model:
            model_dir, described = Path(args.model), args.model
        elif args.quick:
            from tests.fixtures.vision_qwen import build_qwen2_5_vl

            model_dir = build_qwen2_5_vl(Path(tmp) / "qwen")
            described = "the tests' tiny Qwen2.5-VL: a harness check, the figures mean nothing"
        else:
            model_dir = bench_model(args.size)
            name, tower, text, _ = SIZES[args.size]
            described = (f"{name}-shaped, random float32: tower {tower['depth']} blocks of {tower['hidden_size']}, "
                         f"text {text['num_hidden_layers']} layers of {text['hidden_size']}, vocabulary {VOCAB}")
        report = Report()
        report.facts.update(machine_facts())
        report.facts.update({"mlx-vlm": version("mlx-vlm"), "model": described,
                             "requests": f"{args.requests} x one MP4 ({args.frames} frames sampled, {args.side} px "
                                         f"square, distinct per request), {args.tokens} tokens each, greedy"})
        asyncio.run(measure(args, model_dir, Path(tmp), report))
    command = "python -m bench.video " + " ".join(sys.argv[1:] if argv is None else argv)
    report.publish(command, started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
