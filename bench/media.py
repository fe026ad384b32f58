"""The harness the media benches share (``bench.video``, ``bench.audio``): a medium's requests
sent at once to our server vs mlx-vlm's own path one after another, a repeated file's TTFT,
and hostile files, on the same model in one run.

A ``Medium`` says what differs: the file a seed makes, the chat part that carries it, the
inputs mlx-vlm's own loader and processor make from the file on disk, and the hostile
files. Everything else (timing, alternation, the report's tables and goals) is here.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .common import Sample, ratio, rotated
from .report import Report, Row
from .run import log
from .servers import OurServer

QUESTIONS = ["What happens in it?", "Which parts stand out?", "Does anything change?",
             "Where could it have been made?", "What comes first?", "Describe its first half.",
             "Is it real or made up?", "What stands out most?"]


@dataclass
class Medium:
    name: str  # "video", "audio": the chat part's field and the template's part type
    prefix: str  # the text after the file, before each question
    file: Callable[[int], bytes]  # a distinct file per seed
    media_type: str
    suffix: str  # the file's suffix on disk, for mlx-vlm's loader
    # (processor, path, rendered prompt) -> (input ids, generate_step's keyword arguments)
    inputs: Callable[[Any, Path, str], tuple[Any, dict]]
    hostile: Callable[[], list[tuple[str, bytes, str]]]  # (what, data, media type)
    requests: str  # how the report describes one request's file
    throughput_goal: float | None = None  # concurrent over one after another, where the issue sets one
    repeat_goal: float | None = None  # a repeat's TTFT over its first, where the issue sets one


@dataclass
class Result:
    ttft: float
    tokens: int
    prompt_tokens: int = 0
    cached_tokens: int = 0


def _request(medium: Medium, data: bytes, media_type: str, text: str, tokens: int, bypass: bool = False):
    from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
    from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
    from service.gen.mlxgrpc.v1 import speech_pb2 as spb

    carried = gen_pb.Video(data=data, media_type=media_type) if medium.name == "video" else \
        spb.Audio(data=data, media_type=media_type)
    parts = [gen_pb.ContentPart(**{medium.name: carried}), gen_pb.ContentPart(text=text)]
    return pb.GenerateRequest(model="bench", bypass_prefix_cache=bypass,
                              chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", parts=parts)]),
                              stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))


async def ours(server: OurServer, medium: Medium, data: bytes, question: str, tokens: int, bypass: bool) -> Result:
    req = _request(medium, data, medium.media_type, medium.prefix + question, tokens, bypass)
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
    """mlx-vlm's own path on the same directory: its loader reads the file from disk, its
    processor prepares it, ``generate_step`` decodes greedily with EOS masked."""

    def __init__(self, model_dir: Path, medium: Medium, tmp: Path):
        import mlx_vlm

        self.model, self.processor = mlx_vlm.load(str(model_dir))
        eos = self.processor.tokenizer.eos_token_id
        self.no_eos = {int(i): -1e9 for i in (eos if isinstance(eos, list) else [eos])}
        self.medium, self.tmp = medium, tmp

    def run(self, data: bytes, question: str, tokens: int) -> Result:
        import mlx.core as mx
        from mlx_vlm.generate.ar import generate_step

        start = time.perf_counter()
        path = self.tmp / f"{start}{self.medium.suffix}"
        path.write_bytes(data)
        content = [{"type": self.medium.name}, {"type": "text", "text": self.medium.prefix + question}]
        prompt = self.processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                              add_generation_prompt=True, tokenize=False)
        ids, extra = self.medium.inputs(self.processor, path, prompt)
        steps = generate_step(ids, self.model, None, None, temperature=0.0, max_tokens=tokens,
                              logit_bias=self.no_eos, **extra)
        r, first = Result(0.0, 0, prompt_tokens=int(ids.shape[-1])), 0.0
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


async def hostile(server: OurServer, medium: Medium) -> list[tuple[str, float, str]]:
    """(what, seconds to the refusal, status and details) for each hostile file."""
    import grpc

    out = []
    for what, data, media_type in medium.hostile():
        req = _request(medium, data, media_type, "What happens?", 4)
        start = time.perf_counter()
        try:
            async for _ in server.stub.Generate(req):
                pass
            out.append((what, time.perf_counter() - start, "SERVED (wrong)"))
        except grpc.aio.AioRpcError as e:
            out.append((what, time.perf_counter() - start, f"{e.code().name}: {e.details()[:90]}"))
    return out


async def measure(args, medium: Medium, model_dir: Path, tmp: Path, report: Report) -> None:
    """``args``: requests, tokens, reps and apart (mlx-vlm's side closed before our server starts)."""
    rates = {"ours": Sample(), "mlx-vlm": Sample()}
    per_request: dict[str, list[Result]] = {"ours": [], "mlx-vlm": []}
    first, again, cached, refused = Sample(), Sample(), [], []
    anchor: MlxVlm | None = None
    for rep in range(args.reps):
        for side in rotated(["ours", "mlx-vlm"], rep):
            base = 1000 * (rep + 1) + (0 if side == "ours" else 500)
            files = [medium.file(base + i) for i in range(args.requests)]
            questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.requests)]
            if side == "mlx-vlm":
                if anchor is None:
                    log("loading mlx-vlm's side")
                    anchor = MlxVlm(model_dir, medium, tmp)
                    anchor.run(medium.file(7), QUESTIONS[0], 2)  # warm-up
                start = time.perf_counter()
                results = [anchor.run(f, q, args.tokens) for f, q in zip(files, questions)]
                elapsed = time.perf_counter() - start
                if args.apart:
                    anchor.close()
                    anchor = None
            else:
                server = OurServer(model_dir, None, tmp, max_active=max(8, args.requests))
                try:
                    await server.start(timeout=1800)
                    await ours(server, medium, medium.file(7), QUESTIONS[0], 2, bypass=True)  # warm-up
                    start = time.perf_counter()
                    results = list(await asyncio.gather(*(ours(server, medium, f, q, args.tokens, bypass=True)
                                                          for f, q in zip(files, questions))))
                    elapsed = time.perf_counter() - start
                    seen = medium.file(90_000 + rep)
                    a = await ours(server, medium, seen, QUESTIONS[0], args.tokens, bypass=False)
                    b = await ours(server, medium, seen, QUESTIONS[1], args.tokens, bypass=False)
                    first.add(a.ttft)
                    again.add(b.ttft)
                    cached.append((b.cached_tokens, b.prompt_tokens))
                    if rep == 0:
                        refused = await hostile(server, medium)
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
    _tables(args, medium, report, rates, per_request, first, again, cached, refused)


def _tables(args, medium: Medium, report: Report, rates, per_request, first: Sample, again: Sample, cached,
            refused) -> None:
    o, m = rates["ours"], rates["mlx-vlm"]
    prompt = {s: sorted(r.prompt_tokens for r in per_request[s]) for s in per_request}
    same = "the same on both sides" if prompt["ours"] == prompt["mlx-vlm"] else \
        f"mlx-vlm {prompt['mlx-vlm'][0]}-{prompt['mlx-vlm'][-1]}"
    t = report.table(f"{args.requests} requests, {medium.requests} each, {args.tokens} tokens each", "ours",
                     "mlx-vlm")
    t.append(Row("aggregate tok/s", o.fmt(2), m.fmt(2), ratio(o.median, m.median),
                 f"ours concurrent via gRPC; mlx-vlm one after another; prompt tokens {prompt['ours'][0]}-"
                 f"{prompt['ours'][-1]}, {same}"))
    alone = Sample([r.ttft for r in per_request["mlx-vlm"]])
    t.append(Row("TTFT s, the first time a file is seen", first.fmt(2), alone.fmt(2),
                 ratio(first.median, alone.median), "ours alone (the repeat table's first); mlx-vlm each request"))
    t = report.table(f"the same {medium.name} file again (same prompt prefix, another question after it)",
                     "repeat", "first time")
    t.append(Row("TTFT ms", again.fmt(0, 1e3), first.fmt(0, 1e3), ratio(again.median, first.median),
                 f"ours, lower is better; cached/prompt tokens {', '.join(sorted({f'{c}/{p}' for c, p in cached}))}"))
    t = report.table(f"hostile {medium.name} files (refused from the header where it says enough)", "ms", "answer")
    for what, seconds, answer in refused:
        t.append(Row(what, f"{seconds * 1e3:.1f}", answer))
    goals = report.table("goals (ratios from this run)", "measured", "goal")
    for name, a, b, target, higher in (
            (f"{args.requests} {medium.name} requests aggregate vs mlx-vlm one after another", o.median, m.median,
             medium.throughput_goal, True),
            (f"TTFT of a repeated {medium.name} file vs its first time (lower)", again.median, first.median,
             medium.repeat_goal, False)):
        if a and b and target is not None:
            met = a / b >= target if higher else a / b <= target
            goals.append(Row(name, f"{a / b:.2f}x", f"{'>=' if higher else '<='} {target}x",
                             "met" if met else "missed"))
