"""Transcribe: our server vs mlx-audio's own Whisper on the same model and file, in one run.

    .venv/bin/python -m bench.speech --markdown          # Whisper-small's shapes, random weights, 60 s of audio
    .venv/bin/python -m bench.speech --quick             # the tests' tiny Whisper, 8 s (CI smoke)
    .venv/bin/python -m bench.speech --model DIR         # any Whisper directory (mlx-audio's or Hugging Face's layout)

Three figures, measured on the same model in the same run:

* **One transcription.** ``--seconds`` of 16 kHz WAV sent to our server (``--speech-model``,
  grpc.aio through the generated stubs) vs mlx-audio's ``generate`` reading the same file
  in this process, both greedy (``temperature=0``), both with float32 weights (mlx-audio
  loads float16, which runs about 12x slower on a CPU; the server casts to float32): wall
  seconds and the real-time factor (seconds of audio a second); whether the segments are
  the same, token for token.
* **Two at once.** Two transcriptions sent together: they run one after the other on the
  model's thread (the second waits in the admission queue), so the pair's wall time is
  about twice one's; the figure shows the queue's own cost.
* **Hostile audio.** A WAV header claiming ten hours, a file cut short, a mislabelled file:
  each refused INVALID_ARGUMENT naming the field; the time to the refusal.

No real weights are available offline: the model is built once under
``$MLX_GRPC_CACHE/bench`` with random weights (Whisper-small's widths and depths, the
fixture's small vocabulary), so the text is meaningless and every window decodes its full
224 tokens: a worst case for the decoder. Sides alternate in each repetition.
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

from .common import Sample, machine_facts, ratio, rotated, version
from .report import Report, Row
from .run import log
from .servers import OurServer

SMALL = dict(width=768, heads=12, layers=12, text_ctx=448)  # Whisper-small's encoder and decoder


def bench_model() -> Path:
    from engine.loading.model import cache_root
    from tests.fixtures.whisper import build_whisper

    target = cache_root() / "bench" / "whisper-small-random"
    if (target / "preprocessor_config.json").is_file():
        return target
    log(f"building {target} (random weights, once)")
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    build_whisper(tmp, **SMALL)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


async def ours(server: OurServer, data: bytes, media_type: str = "audio/wav") -> tuple[float, list[list[int]]]:
    from service.gen.mlxgrpc.v1 import speech_pb2 as spb

    req = spb.TranscribeRequest(model="speech", audio=spb.Audio(data=data, media_type=media_type))
    start, tokens = time.perf_counter(), []
    async for event in server.stub.Transcribe(req, timeout=3600):
        if event.WhichOneof("event") == "segment":
            tokens.append(list(event.segment.token_ids))
    return time.perf_counter() - start, tokens


def theirs(model, path: Path) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    out = model.generate(str(path), temperature=0.0, verbose=None, fp16=False)
    return time.perf_counter() - start, [list(s["tokens"]) for s in out.segments]


async def hostile(server: OurServer) -> list[tuple[str, float, str]]:
    import grpc

    from tests.fixtures.whisper import wav, wav_bytes

    out = []
    for what, data, media in (("a WAV header claiming ten hours", wav_bytes(b"\0\0" * 1600, 16000, 1,
                                                                            claimed=36000 * 32000), "audio/wav"),
                              ("a WAV cut at a third", wav(30.0)[: 16000 * 20], "audio/wav"),
                              ("a WAV called MP3", wav(2.0), "audio/mpeg")):
        start = time.perf_counter()
        try:
            await ours(server, data, media)
            out.append((what, time.perf_counter() - start, "SERVED (wrong)"))
        except grpc.aio.AioRpcError as e:
            out.append((what, time.perf_counter() - start, f"{e.code().name}: {e.details()[:80]}"))
    return out


async def measure(args, model_dir: Path, tmp: Path, report: Report) -> None:
    from engine.loading.embedded import default_generation_model
    from engine.speech.model import load_whisper
    from tests.fixtures.whisper import wav

    data = wav(args.seconds, seed=3)
    path = tmp / "speech.wav"
    path.write_bytes(data)
    log("loading mlx-audio's side")
    anchor = load_whisper(model_dir)  # mlx-audio's model, weights in the dtype the server runs them
    server = OurServer(default_generation_model(), None, tmp, extra=["--speech-model", f"speech={model_dir}"])
    times = {"ours": Sample(), "mlx-audio": Sample()}
    same, pair, refused = [], Sample(), []
    try:
        await server.start()
        await ours(server, wav(1.0))  # warm-up on both sides
        (tmp / "warm.wav").write_bytes(wav(1.0))
        theirs(anchor, tmp / "warm.wav")
        for rep in range(args.reps):
            got: dict[str, list] = {}
            for side in rotated(["ours", "mlx-audio"], rep):
                seconds, tokens = await ours(server, data) if side == "ours" else theirs(anchor, path)
                times[side].add(seconds)
                got[side] = tokens
            same.append(got["ours"] == got["mlx-audio"])
            start = time.perf_counter()
            await asyncio.gather(ours(server, data), ours(server, data))
            pair.add(time.perf_counter() - start)
            log(f"rep {rep + 1}/{args.reps}: ours {times['ours'].values[-1]:.2f} s, mlx-audio "
                f"{times['mlx-audio'].values[-1]:.2f} s, two at once {pair.values[-1]:.2f} s, same {same[-1]}")
        refused = await hostile(server)
    finally:
        await server.close()
    o, m = times["ours"], times["mlx-audio"]
    t = report.table(f"{args.seconds:g} s of 16 kHz speech, greedy", "ours", "mlx-audio")
    t.append(Row("seconds", o.fmt(2), m.fmt(2), ratio(o.median, m.median), "lower is better; ours via gRPC"))
    t.append(Row("real-time factor (audio s / s)", f"{args.seconds / o.median:.1f}", f"{args.seconds / m.median:.1f}",
                 ratio(m.median, o.median), f"same segments token for token: {sum(same)}/{len(same)}"))
    t.append(Row("two at once, seconds", pair.fmt(2), f"{2 * m.median:.2f}", ratio(pair.median, 2 * m.median),
                 "ours: both sent together (one runs, one waits); mlx-audio: twice one"))
    t = report.table("hostile audio (refused from the header where it says enough)", "ms", "answer")
    for what, seconds, answer in refused:
        t.append(Row(what, f"{seconds * 1e3:.1f}", answer))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.speech", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a Whisper directory instead of the random Whisper-small-shaped one")
    p.add_argument("--seconds", type=float, default=60.0, help="seconds of audio per transcription")
    p.add_argument("--reps", type=int, default=2, help="repetitions (sides alternate inside each)")
    p.add_argument("--quick", action="store_true", help="the tests' tiny Whisper, 8 s, 1 repetition")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds, args.reps = 8.0, 1
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-speech-") as tmp:
        if args.model:
            model_dir, described = Path(args.model), args.model
        elif args.quick:
            from tests.fixtures.whisper import build_whisper

            model_dir = build_whisper(Path(tmp) / "whisper")
            described = "the tests' tiny Whisper: a harness check, the figures mean nothing"
        else:
            model_dir = bench_model()
            described = (f"Whisper-small-shaped ({SMALL['layers']} + {SMALL['layers']} blocks of {SMALL['width']}), "
                         "random weights run in float32, the fixture's vocabulary")
        report = Report()
        report.facts.update(machine_facts())
        report.facts.update({"mlx-audio": version("mlx-audio"), "model": described})
        asyncio.run(measure(args, model_dir, Path(tmp), report))
    command = "python -m bench.speech " + " ".join(sys.argv[1:] if argv is None else argv)
    report.publish(command, started, args.markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
