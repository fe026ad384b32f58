"""Embeddings over gRPC: one big batch per call against many small concurrent calls.

    python -m bench.embeddings [--embedding-model DIR] [--inputs 256] [--clients 16] [--reps 3]
    python -m bench.embeddings --soak 10000     # the server's RSS over many calls of mixed lengths

Starts ``mlx-grpc serve`` with the embedding model (default: the embedded all-MiniLM-L6-v2) and,
each repetition, embeds the same number of distinct short sentences and ~200-token passages
two ways, sides rotating: one Embed call of 64 inputs at a time, and ``--clients`` concurrent
clients each sending calls of 1 to 4 inputs. Concurrent calls share forwards (the engine's
batcher), so their aggregate should come near the big batch's. Inputs are distinct per
repetition and side: the server's object cache never answers.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from pathlib import Path

from .common import Sample, embedding_texts, machine_facts, ratio, rotated
from .servers import OurServer

PASSAGE_WORDS = 150  # ~200 tokens of MiniLM's vocabulary


def passages(n: int, salt: str) -> list[str]:
    return [" ".join(t for t in itertools.islice(itertools.cycle(s.split()), PASSAGE_WORDS))
            for s in embedding_texts(n, salt)]


async def big_batches(server: OurServer, texts: list[str], per_call: int = 64) -> float:
    start = time.perf_counter()
    for i in range(0, len(texts), per_call):
        await server.embed(texts[i:i + per_call])
    return len(texts) / (time.perf_counter() - start)


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
    server = OurServer(default_generation_model(), embedding, log_dir)
    await server.start()
    try:
        await server.embed(embedding_texts(64, "warm-up"))
        await server.embed(passages(16, "warm-up"))
        if args.soak:
            marks = await soak(server, args.soak, args.clients)
            settled = [rss for _, rss in marks[1:]]  # from the second tenth on: caches warm
            mid = sorted(settled)[len(settled) // 2]
            print(f"\nRSS from call {marks[1][0]} to {marks[-1][0]}: {min(settled):.0f}-{max(settled):.0f} MiB, "
                  f"{min(settled) / mid - 1:+.1%} / {max(settled) / mid - 1:+.1%} of the median {mid:.0f} MiB "
                  f"(after the first tenth: {marks[0][1]:.0f} MiB)")
            return
        results: dict[tuple[str, str], Sample] = {}
        workloads = {"short sentences": lambda salt: embedding_texts(args.inputs, salt),
                     "passages (~200 tokens)": lambda salt: passages(args.inputs // 4, salt)}
        for rep in range(args.reps):
            for workload, make in workloads.items():
                for side in rotated(["one call of 64", f"{args.clients} clients x 1-4"], rep):
                    texts = make(f"{rep}-{side}")
                    rate = (await big_batches(server, texts) if side.startswith("one")
                            else await small_clients(server, texts, args.clients))
                    results.setdefault((workload, side), Sample()).add(rate)
                    print(f"[embeddings] rep {rep} {workload}, {side}: {rate:.1f} inputs/s", flush=True)
    finally:
        await server.close()
    facts = machine_facts()
    print(f"\n{facts['machine']}; model {embedding.name}; {args.reps} reps\n")
    print(f"| workload | one call of 64 (inputs/s) | {args.clients} clients x 1-4 (inputs/s) | ratio |")
    print("|---|---|---|---|")
    for workload in workloads:
        big, small = results[(workload, "one call of 64")], results[(workload, f"{args.clients} clients x 1-4")]
        print(f"| {workload} | {big.fmt()} | {small.fmt()} | {ratio(small.median, big.median)} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embedding-model", help="BERT-family directory (default: the embedded all-MiniLM-L6-v2)")
    p.add_argument("--inputs", type=int, default=256, help="short sentences per side and repetition "
                                                           "(passages: a quarter as many)")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients on the small side")
    p.add_argument("--reps", type=int, default=3, help="repetitions (each runs every side once)")
    p.add_argument("--soak", type=int, default=0, metavar="CALLS",
                   help="instead: this many calls of mixed lengths, the server's RSS every tenth of them")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
