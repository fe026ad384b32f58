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
from pathlib import Path

import engine  # noqa: F401  - BLAS before mlx

from .common import machine_facts, version
from .media import Medium, measure
from .report import Report
from .run import log

PREFIX = "Watch this video carefully before you answer. Question: "
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


def medium(frames: int, side: int) -> Medium:
    """Videos: ``frames`` sampled frames of ``side`` pixels square, read by mlx-vlm's
    ``load_video`` from the file."""
    from tests.video_files import avi, claiming_frames, truncated

    def inputs(processor, path: Path, prompt: str):
        from mlx_vlm.utils import prepare_inputs

        got = prepare_inputs(processor, videos=[str(path)], prompts=prompt)
        return got["input_ids"], {"pixel_values_videos": got["pixel_values_videos"],
                                  "video_grid_thw": got["video_grid_thw"]}

    def hostile():
        return [("a header claiming 100,000 frames", claiming_frames(avi(), 100_000), "video/x-msvideo"),
                ("8000 x 8000 frames", avi(frames=2, size=(8000, 8000)), "video/x-msvideo"),
                ("an AVI cut at 90%", truncated(avi(frames=8, size=(448, 448))), "video/x-msvideo")]

    return Medium("video", PREFIX, lambda seed: video(seed, frames, side), "video/mp4", ".mp4", inputs, hostile,
                  f"one {frames}-frame {side}x{side} MP4", THROUGHPUT_GOAL, REPEAT_GOAL)


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
        asyncio.run(measure(args, medium(args.frames, args.side), model_dir, Path(tmp), report))
    command = "python -m bench.video " + " ".join(sys.argv[1:] if argv is None else argv)
    report.publish(command, started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
