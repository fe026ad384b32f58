"""Audio in the prompt: our server vs mlx-vlm on the same Qwen3-Omni-shaped model, in one run.

    .venv/bin/python -m bench.audio --markdown      # Qwen3-Omni's audio encoder over a small MoE text model
    .venv/bin/python -m bench.audio --quick         # the tests' tiny Qwen3-Omni (CI smoke)
    .venv/bin/python -m bench.audio --model DIR     # any qwen3_omni_moe directory

Three figures, measured on the same model in the same run (``bench.media``'s harness):

* **Throughput.** ``--requests`` chat requests, one distinct ``--seconds``-second WAV
  each, sent at once to our server (grpc.aio through the generated stubs) vs mlx-vlm's
  own audio path (its ``load_audio`` from the file, its processor, ``generate_step``) one
  after another in this process; greedy, ``--tokens`` each; our requests bypass the
  prefix cache. Sides alternate in each repetition.
* **A repeated file.** A fresh file, then the same file and prompt prefix with another
  question: the second TTFT over the first (the encoded audio and the prefix cache).
* **Hostile audio.** A WAV header claiming ten hours, a file cut short, a WAV sent as MP3:
  each refused INVALID_ARGUMENT naming the part; the time to the refusal.

No real weights are available offline: the model is built once under
``$MLX_GRPC_CACHE/bench`` with random float32 weights: Qwen3-Omni-30B-A3B's audio encoder
(32 blocks of 1280, 128 mel bins) over a small Qwen3-MoE text model (the 30B text side
does not fit this machine as float32); the text is meaningless, the timings real. The
issue sets no throughput goal for audio; the figures are reported as measured.
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

PREFIX = "Listen to this recording carefully before you answer. Question: "
# Qwen3-Omni-30B-A3B's audio encoder; the text model: 12 layers of 1024 with 8 experts of 768, 2 used
ENCODER = dict(d_model=1280, encoder_layers=32, num_hidden_layers=32, encoder_attention_heads=20,
               encoder_ffn_dim=5120, downsample_hidden_size=480)
TEXT = dict(hidden_size=1024, num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
            tie_word_embeddings=True, qk_norm=True)
EXPERTS = (8, 2, 768)
VOCAB = 151936


def bench_model() -> Path:
    from engine.loading.model import cache_root
    from tests.fixtures.models import ModelSpec
    from tests.fixtures.omni import build_qwen3_omni

    target = cache_root() / "bench" / "qwen3_omni-encoder-random"
    if (target / "preprocessor_config.json").is_file():
        return target
    log(f"building {target} (random weights, once)")
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    build_qwen3_omni(tmp, text=ModelSpec(model_type="qwen3", extra_config={"rope_theta": 1e6}, **TEXT),
                     audio=ENCODER, experts=EXPERTS, vocab_size=VOCAB)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def medium(seconds: float) -> Medium:
    """Audio files: ``seconds`` of a 16 kHz mono WAV, read by mlx-vlm's ``load_audio``."""
    from tests.fixtures.whisper import wav, wav_bytes

    def inputs(processor, path: Path, prompt: str):
        from mlx_vlm.utils import load_audio, prepare_inputs

        heard = load_audio(str(path), processor.feature_extractor.sampling_rate)
        got = prepare_inputs(processor, audio=[heard], prompts=prompt)
        return got["input_ids"], {"input_features": got["input_features"],
                                  "feature_attention_mask": got["feature_attention_mask"]}

    def hostile():
        return [("a WAV header claiming ten hours", wav_bytes(b"\0\0" * 1600, 16000, 1, claimed=36000 * 32000),
                 "audio/wav"),
                ("a WAV cut at 60%", wav(seconds)[:int(len(wav(seconds)) * 0.6)], "audio/wav"),
                ("a WAV sent as audio/mpeg", wav(seconds), "audio/mpeg")]

    return Medium("audio", PREFIX, lambda seed: wav(seconds, seed=seed), "audio/wav", ".wav", inputs, hostile,
                  f"one {seconds:g}-second 16 kHz WAV")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.audio", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a qwen3_omni_moe directory instead of a random one")
    p.add_argument("--requests", type=int, default=8, help="concurrent requests (one file each)")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of audio per file")
    p.add_argument("--tokens", type=int, default=32, help="tokens generated per request")
    p.add_argument("--reps", type=int, default=1, help="repetitions (sides alternate inside each)")
    p.add_argument("--quick", action="store_true", help="the tests' tiny Qwen3-Omni, 2 requests, 1 repetition")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.tokens, args.reps, args.seconds = 2, 8, 1, 2.0
    args.apart = not args.quick  # mlx-vlm's copy closed before our server starts
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-audio-") as tmp:
        if args.model:
            model_dir, described = Path(args.model), args.model
        elif args.quick:
            from tests.fixtures.omni import build_qwen3_omni

            model_dir = build_qwen3_omni(Path(tmp) / "omni")
            described = "the tests' tiny Qwen3-Omni: a harness check, the figures mean nothing"
        else:
            model_dir = bench_model()
            described = (f"Qwen3-Omni-shaped, random float32: its audio encoder ({ENCODER['encoder_layers']} blocks "
                         f"of {ENCODER['d_model']}), text {TEXT['num_hidden_layers']} layers of "
                         f"{TEXT['hidden_size']} with {EXPERTS[0]} experts of {EXPERTS[2]} ({EXPERTS[1]} used), "
                         f"vocabulary {VOCAB}")
        report = Report()
        report.facts.update(machine_facts())
        report.facts.update({"mlx-vlm": version("mlx-vlm"), "model": described,
                             "requests": f"{args.requests} x one {args.seconds:g}-second WAV (distinct per request), "
                                         f"{args.tokens} tokens each, greedy"})
        asyncio.run(measure(args, medium(args.seconds), model_dir, Path(tmp), report))
    command = "python -m bench.audio " + " ".join(sys.argv[1:] if argv is None else argv)
    report.publish(command, started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
