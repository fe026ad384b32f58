"""What each packed embedding type costs in retrieval, in one run: a corpus of the
project's own documentation sentences embedded once as float32 and as float16, int8 and
ubinary (the same vectors converted by the server), then, for each query sentence, its
10 nearest neighbours among the others by cosine (ubinary: Hamming distance) compared
with float32's: the mean overlap, and the response bytes per vector. The same for the float32
vectors of the model served with ``--embed-precision bf16`` and ``int8`` (its products in
those precisions where the CPU runs them, or with ``--force-precision``).

    python -m bench.embedding_types [--dimensions 0] [--queries 200] [--force-precision]
"""

from __future__ import annotations

if __package__ in (None, ""):
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import argparse
import asyncio
import re
import tempfile
from pathlib import Path

import numpy as np

from .common import machine_facts
from .embeddings import PRECISIONS, dtype, precision_flags
from .servers import OurServer

ROOT = Path(__file__).resolve().parent.parent
TYPES = ("FLOAT32", "FLOAT16", "INT8", "UBINARY")


def corpus(limit: int) -> list[str]:
    """Distinct prose sentences of 40 to 300 characters from README.md and docs/."""
    seen: dict[str, None] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", " ", path.read_text(), flags=re.S)
        for line in text.splitlines():
            if line.startswith(("|", "#", "    ")):
                continue
            for sentence in re.split(r"(?<=[.!?])\s+", re.sub(r"[`*_\[\]]", "", line).strip()):
                if 40 <= len(sentence) <= 300:
                    seen.setdefault(sentence)
    return list(seen)[:limit]


async def vectors(server: OurServer, texts: list[str], kind: str, dimensions: int,
                  model: str = "embed") -> tuple[np.ndarray, int]:
    """[texts, dims] (ubinary: bytes) and the packed data's bytes."""
    from engine.embedding.packing import EmbeddingType, unpack
    from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

    out, size = [None] * len(texts), 0
    for start in range(0, len(texts), 64):
        async for r in server.stub.Embed(pb.EmbedRequest(
                model=model, inputs=texts[start:start + 64], packed=True, dimensions=dimensions,
                embedding_type=pb.EmbeddingType.Value(f"EMBEDDING_TYPE_{kind}"))):
            p, size = r.packed, size + len(r.packed.data)
            if kind == "UBINARY":
                block = np.frombuffer(p.data, np.uint8).reshape(len(p.indices), -1)
            else:
                block = unpack(p.data, len(p.indices), p.dimensions, EmbeddingType[kind], p.scales)
            for i, row in zip(p.indices, block):
                out[start + i] = row
    return np.stack(out), size


def neighbours(block: np.ndarray, queries: int, k: int, hamming: bool) -> np.ndarray:
    if hamming:
        bits = np.unpackbits(block, axis=1).astype(np.int32)
        distance = (bits[:queries, None, :] != bits[None, :, :]).sum(-1).astype(np.float64)
    else:
        unit = block / np.linalg.norm(block, axis=1, keepdims=True)
        distance = -(unit[:queries] @ unit.T)
    distance[np.arange(queries), np.arange(queries)] = np.inf  # not itself
    return np.argsort(distance, axis=1, kind="stable")[:, :k]


async def run(args) -> None:
    from engine.loading.embedded import default_embedding_model, default_generation_model

    texts = corpus(args.corpus)
    server = OurServer(default_generation_model(), default_embedding_model(), Path(tempfile.mkdtemp()),
                       extra=precision_flags(default_embedding_model(), args.force_precision))
    await server.start()
    try:
        blocks = {kind: await vectors(server, texts, kind, args.dimensions) for kind in TYPES}
        for precision, model in PRECISIONS.items():
            label = f"float32 vectors, {precision} products ({await dtype(server, model)})"
            blocks[label] = await vectors(server, texts, "FLOAT32", args.dimensions, model)
    finally:
        await server.close()
    exact = neighbours(blocks["FLOAT32"][0], args.queries, 10, False)
    dims = blocks["FLOAT32"][0].shape[1]
    print(f"\n{machine_facts()['machine']}; MiniLM, {len(texts)} documentation sentences, {args.queries} queries, "
          f"{dims} dimensions\n")
    print("| type | bytes a vector | top-10 overlap with float32 (mean) | lowest |")
    print("|---|---|---|---|")
    for kind in blocks:
        block, size = blocks[kind]
        found = neighbours(block, args.queries, 10, kind == "UBINARY")
        overlap = np.array([len(set(a) & set(b)) / 10 for a, b in zip(found, exact)])
        name = kind.lower() if kind in TYPES else kind
        print(f"| {name} | {size / len(texts):.0f} | {overlap.mean():.3f} | {overlap.min():.1f} |")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.embedding_types", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=int, default=2000, help="documentation sentences embedded (at most)")
    p.add_argument("--queries", type=int, default=200, help="sentences whose neighbours are compared")
    p.add_argument("--dimensions", type=int, default=0, help="Matryoshka dimensions (0: whole vectors)")
    p.add_argument("--force-precision", action="store_true",
                   help="run the bf16 and int8 products even where the CPU lacks their instructions")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
