"""Embeddings over gRPC against sentence-transformers (torch and ONNX Runtime), and one big
batch per call against many small concurrent calls.

    python -m bench.embeddings --setup-anchors ~/.cache/mlx-grpc-anchors   # once, by hand (GBs)
    python -m bench.embeddings [--anchors ~/.cache/mlx-grpc-anchors/bin/python] [--reps 3]
    python -m bench.embeddings --soak 10000     # the server's RSS over many calls of mixed lengths

Starts ``mlx-grpc serve`` with the embedding model (default: the embedded all-MiniLM-L6-v2) and,
each repetition, embeds the same number of distinct short sentences and ~240-token passages
on every side, sides rotating: ours as one Embed call of 64 inputs at a time (a message per
vector, and packed: float32 vectors by the message; and packed again from the same model served
with ``--embed-precision bf16`` and ``int8``, which run float32 on a CPU without AVX-512 BF16 or
VNNI unless ``--force-precision``; GetModelInfo's dtype labels what ran), ours as
``--clients`` concurrent clients each sending calls of 1 to 4 inputs (concurrent calls share
forwards, so their aggregate should come near the big batch's), and, given ``--anchors``,
sentence-transformers on torch, on ONNX Runtime and on ONNX Runtime int8 (its dynamic
quantizer) in batches of 32, in their own process, on the same model files. Inputs are
distinct per repetition and side: the server's object cache never answers. Every input ours
embedded in one call is embedded by the anchors and by our other precisions too, untimed, and
the lowest cosines are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from pathlib import Path

import numpy as np

from .common import Sample, embedding_texts, machine_facts, ratio, rotated
from .embedding_anchor import AnchorProcess, setup_anchors
from .servers import OurServer

BIG = "ours, one call of 64"
PACKED = "ours, one packed call of 64"
# Between sides: the side before may leave threads spinning (OpenMP, ONNX Runtime, MKL) that
# would take cores from the next one.
SETTLE_S = 0.5
ANCHORS = {"sentence-transformers torch": "torch", "sentence-transformers ONNX Runtime": "onnx",
           "ONNX Runtime int8": "onnx-int8"}
F32_ANCHORS = ("sentence-transformers torch", "sentence-transformers ONNX Runtime")
PRECISIONS = {"bf16": "embed-bf16", "int8": "embed-int8"}  # --embed-precision: the served model's name

PASSAGE_WORDS = 150  # ~240 tokens of MiniLM's vocabulary


def passages(n: int, salt: str) -> list[str]:
    return [" ".join(t for t in itertools.islice(itertools.cycle(s.split()), PASSAGE_WORDS))
            for s in embedding_texts(n, salt)]


async def big_batches(server: OurServer, texts: list[str], per_call: int = 64,
                      packed: bool = False, model: str = "embed") -> tuple[float, np.ndarray]:
    """(inputs per second, the vectors in input order); ``packed``: float32 vectors by the message."""
    from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

    vectors: list = [None] * len(texts)
    start = time.perf_counter()
    for i in range(0, len(texts), per_call):
        async for r in server.stub.Embed(pb.EmbedRequest(model=model, inputs=texts[i:i + per_call], packed=packed)):
            if packed:
                block = np.frombuffer(r.packed.data, "<f4").reshape(len(r.packed.indices), r.packed.dimensions)
                for index, row in zip(r.packed.indices, block):
                    vectors[i + index] = row
            else:
                vectors[i + r.index] = r.embedding
    rate = len(texts) / (time.perf_counter() - start)
    return rate, np.array([list(v) for v in vectors], dtype=np.float32)


async def small_clients(server: OurServer, texts: list[str], clients: int) -> float:
    calls: list[list[str]] = []
    sizes = itertools.cycle((1, 2, 3, 4))
    i = 0
    while i < len(texts):
        n = next(sizes)
        calls.append(texts[i:i + n])
        i += n
    queue: asyncio.Queue = asyncio.Queue()
    for call in calls:
        queue.put_nowait(call)

    async def client() -> None:
        while not queue.empty():
            await server.embed(queue.get_nowait())

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return len(texts) / (time.perf_counter() - start)


async def soak(server: OurServer, calls: int, clients: int) -> list[tuple[int, float]]:
    """(calls done, server RSS in MiB) every tenth of ``calls``: calls of 1-4 distinct inputs,
    short sentences and passages mixed, ``clients`` at a time."""
    import psutil

    process = psutil.Process(server.proc.proc.pid)
    done, marks, finished = 0, [], [0]  # calls started, RSS marks, calls finished
    counter = itertools.count()

    async def client() -> None:
        nonlocal done
        while done < calls:
            n = next(counter)
            texts = embedding_texts(1 + n % 4, f"soak{n}")
            if n % 3 == 0:
                texts = passages(1 + n % 2, f"soak{n}")
            done += 1
            await server.embed(texts)
            finished[0] += 1
            if finished[0] % max(1, calls // 10) == 0:
                marks.append((finished[0], process.memory_info().rss / 2**20))
                print(f"[embeddings] soak {finished[0]} calls: RSS {marks[-1][1]:.0f} MiB", flush=True)

    await asyncio.gather(*(client() for _ in range(clients)))
    return marks


async def run(args) -> None:
    from engine.loading.embedded import default_embedding_model, default_generation_model

    embedding = Path(args.embedding_model) if args.embedding_model else default_embedding_model()
    log_dir = Path(tempfile.mkdtemp(prefix="bench-embeddings-"))
    anchor = AnchorProcess(Path(args.anchors), embedding) if args.anchors else None
    extra = [] if args.soak else precision_flags(embedding, args.force_precision)
    server = OurServer(default_generation_model(), embedding, log_dir, extra=extra)
    await server.start()
    try:
        await server.embed(embedding_texts(64, "warm-up"))
        await server.embed(passages(16, "warm-up"))
        if args.soak:
            return report_soak(await soak(server, args.soak, args.clients))
        small = f"ours, {args.clients} clients x 1-4"
        precision_sides = {f"ours packed, {p} ({await dtype(server, m)})": m for p, m in PRECISIONS.items()}
        for model in precision_sides.values():
            await big_batches(server, embedding_texts(64, "warm-up") + passages(16, "warm-up"), model=model)
        sides = [BIG, PACKED, small, *precision_sides] + (list(ANCHORS) if anchor else [])
        results: dict[tuple[str, str], Sample] = {}
        ours: dict[str, np.ndarray] = {}  # text -> our vector, for the cosine pass
        workloads = {"short sentences": lambda salt: embedding_texts(args.inputs, salt),
                     "passages (~240 tokens)": lambda salt: passages(args.inputs // 4, salt)}
        for rep in range(args.reps):
            for workload, make in workloads.items():
                for side in rotated(sides, rep):
                    texts = make(f"{rep}{sides.index(side)}")  # salts of one length: inputs alike on every side
                    await asyncio.sleep(SETTLE_S)
                    if side in (BIG, PACKED):
                        rate, vectors = await big_batches(server, texts, packed=side == PACKED)
                        ours.update(zip(texts, vectors))
                    elif side == small:
                        rate = await small_clients(server, texts, args.clients)
                    elif side in precision_sides:
                        rate, _ = await big_batches(server, texts, packed=True, model=precision_sides[side])
                    else:
                        rate, _ = anchor.encode(ANCHORS[side], texts)
                    results.setdefault((workload, side), Sample()).add(rate)
                    print(f"[embeddings] rep {rep} {workload}, {side}: {rate:.1f} inputs/s", flush=True)
        cosines = {side: min_cosine(anchor, backend, ours) for side, backend in ANCHORS.items()} if anchor else {}
        for side, model in precision_sides.items():
            cosines[side] = await precision_cosine(server, model, ours)
    finally:
        await server.close()
        if anchor:
            anchor.close()
    report(args, embedding, workloads, sides, results, cosines, anchor.facts if anchor else None)


def precision_flags(embedding: Path, force: bool) -> list[str]:
    """The same model served again under each precision's name."""
    flags = []
    for precision, model in PRECISIONS.items():
        flags += ["--embedding-model", f"{model}={embedding}", "--embed-precision", f"{model}={precision}"]
    return flags + (["--embed-precision-force"] if force else [])


async def dtype(server: OurServer, model: str) -> str:
    """What the served model's products run in (GetModelInfo's dtype)."""
    from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

    return (await server.stub.GetModelInfo(pb.GetModelInfoRequest(model=model))).info.dtype


async def precision_cosine(server: OurServer, model: str, ours: dict[str, np.ndarray]) -> tuple[float, int]:
    """The lowest cosine between ``model``'s vector and our float32 one over every text ours embedded."""
    texts = list(ours)
    _, theirs = await big_batches(server, texts, packed=True, model=model)
    return float((np.stack([ours[t] for t in texts]) * theirs).sum(axis=1).min()), len(texts)


def min_cosine(anchor: AnchorProcess, backend: str, ours: dict[str, np.ndarray]) -> tuple[float, int]:
    """The lowest cosine between our vector and the anchor's over every text ours embedded."""
    texts = list(ours)
    _, theirs = anchor.encode(backend, texts)
    mine = np.stack([ours[t] for t in texts])
    cos = (mine * theirs).sum(axis=1) / (np.linalg.norm(mine, axis=1) * np.linalg.norm(theirs, axis=1))
    return float(cos.min()), len(texts)


def report(args, embedding: Path, workloads, sides, results, cosines, anchor_facts) -> None:
    facts = machine_facts()
    print(f"\n{facts['machine']}; model {embedding.name}; {args.reps} reps; inputs/s, median [min-max]")
    if anchor_facts:
        print("anchors: " + ", ".join(f"{k} {v}" for k, v in anchor_facts.items()) + "; batch 32, in-process")
    print()
    bf16, int8 = sides[3:5]
    extra = (["ours / best f32 anchor", "packed / best f32 anchor", "bf16 / best f32 anchor",
              "int8 / best f32 anchor", "int8 / ONNX Runtime int8"] if anchor_facts else [])
    print("| workload | " + " | ".join(sides) + " | " + " | ".join(["packed / one call", "clients / one call", *extra])
          + " |")
    print("|---" * (len(sides) + 3 + len(extra)) + "|")
    for workload in workloads:
        cells = [results[(workload, side)].fmt() for side in sides]
        big, packed, small, b16, i8 = (results[(workload, side)].median for side in sides[:5])
        cells += [ratio(packed, big), ratio(small, big)]
        if anchor_facts:
            best = max(results[(workload, side)].median for side in F32_ANCHORS)
            cells += [ratio(big, best), ratio(packed, best), ratio(b16, best), ratio(i8, best),
                      ratio(i8, results[(workload, "ONNX Runtime int8")].median)]
        print(f"| {workload} | " + " | ".join(cells) + " |")
    for side, (low, n) in cosines.items():
        against = f"{side} against ours (float32)" if side in (bf16, int8) else f"ours against {side}"
        print(f"\nlowest cosine, {against}, over {n} inputs: {low:.7f}")
    if not anchor_facts:
        print("\n(no anchors: --setup-anchors DIR once, then --anchors DIR/bin/python)")


def report_soak(marks: list[tuple[int, float]]) -> None:
    settled = [rss for _, rss in marks[1:]]  # from the second tenth on: caches warm
    mid = sorted(settled)[len(settled) // 2]
    print(f"\nRSS from call {marks[1][0]} to {marks[-1][0]}: {min(settled):.0f}-{max(settled):.0f} MiB, "
          f"{min(settled) / mid - 1:+.1%} / {max(settled) / mid - 1:+.1%} of the median {mid:.0f} MiB "
          f"(after the first tenth: {marks[0][1]:.0f} MiB)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embedding-model", help="BERT-family directory (default: the embedded all-MiniLM-L6-v2)")
    p.add_argument("--inputs", type=int, default=256, help="short sentences per side and repetition "
                                                           "(passages: a quarter as many)")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients on the small side")
    p.add_argument("--reps", type=int, default=3, help="repetitions (each runs every side once)")
    p.add_argument("--soak", type=int, default=0, metavar="CALLS",
                   help="instead: this many calls of mixed lengths, the server's RSS every tenth of them")
    p.add_argument("--force-precision", action="store_true",
                   help="run the bf16 and int8 sides' products even where the CPU lacks their instructions "
                        "(--embed-precision-force: slower than float32 there)")
    p.add_argument("--anchors", metavar="PYTHON",
                   help="the Python of a venv holding sentence-transformers[onnx] and torch (see --setup-anchors)")
    p.add_argument("--setup-anchors", metavar="DIR",
                   help="only create (or update) that venv at DIR, from the package index, and exit")
    args = p.parse_args()
    if args.setup_anchors:
        print(f"anchors ready: --anchors {setup_anchors(Path(args.setup_anchors).expanduser())}")
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
