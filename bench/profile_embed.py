"""Where an Embed forward spends its time, MLX's ops against the CPU kernels
(the embed section of ``python -m bench --profile``).

One batch of each workload (short sentences, ~200-token passages) is run through the
BERT encoder and pooled as Embed pools it. Every matmul, attention, norm and activation
call is recorded and each category replayed alone; "the rest" (embedding lookup,
packing, head splits, residual adds, pooling and MLX's scheduling) is the forward minus
those. GFLOP/s counts the matmuls' multiply-adds twice over the forward's time.
"""

from __future__ import annotations

from dataclasses import dataclass

import engine  # noqa: F401  - BLAS before mlx
import mlx.core as mx
import numpy as np

from .profile import CATEGORIES, Profile, profile_calls


@dataclass(frozen=True)
class Workload:
    name: str
    texts: list[str]


def workloads(short: int = 64, passages: int = 16) -> list[Workload]:
    from .common import embedding_texts
    from .embeddings import passages as make_passages

    return [Workload(f"{short} short sentences", embedding_texts(short, "profile")),
            Workload(f"{passages} passages", make_passages(passages, "profile"))]


def _batch(model, texts: list[str]) -> tuple[mx.array, mx.array, int]:
    ids_list, _ = model.encode(texts)
    L = max(len(ids) for ids in ids_list)
    ids = np.zeros((len(ids_list), L), dtype=np.int32)
    mask = np.zeros((len(ids_list), L), dtype=np.int32)
    for r, row in enumerate(ids_list):
        ids[r, :len(row)], mask[r, :len(row)] = row, 1
    return mx.array(ids), mx.array(mask), sum(len(i) for i in ids_list)


def _pooled(encoder, ids: mx.array, mask: mx.array) -> mx.array:
    h = encoder(ids, mask)
    m = mask.astype(mx.float32)[:, :, None]
    return (h * m).sum(axis=1) / mx.maximum(m.sum(axis=1), 1e-9)


def matmul_flops(encoder, tokens: int) -> float:
    cfg = encoder.config
    per_layer = 4 * cfg.hidden_size ** 2 + 2 * cfg.hidden_size * cfg.intermediate_size
    return 2.0 * per_layer * cfg.num_hidden_layers * tokens


def profile_encoder(encoder, ids: mx.array, mask: mx.array, reps: int = 3) -> Profile:
    return profile_calls(lambda: _pooled(encoder, ids, mask), reps)


def run(embed_dir, reps: int = 3, log=print) -> str:
    from engine import kernels
    from engine.embedding.pooling import EmbeddingModel

    sides: dict[str, list[tuple[Profile, int]]] = {}
    jobs = workloads()
    for label, use in (("stock", False), ("kernels", True)):
        model = EmbeddingModel.load(embed_dir)
        if use and not kernels.apply_to_encoder(model.encoder, model.name):
            log("profiling embed: the CPU kernels are not available, stock only")
            continue
        log(f"profiling embed, {label}")
        sides[label] = []
        for job in jobs:
            ids, mask, tokens = _batch(model, job.texts)
            sides[label].append((profile_encoder(model.encoder, ids, mask, reps), tokens))
        encoder = model.encoder
        del model
    labels = list(sides)
    head = "| part | " + " | ".join(f"{job.name} ({sides[labels[0]][i][1]} tokens): {s}"
                                     for i, job in enumerate(jobs) for s in labels) + " |"
    rows = [head, "|---|" + "---|" * (len(jobs) * len(labels))]

    def row(name, get, fmt="{:.1f}"):
        cells = [get(*sides[s][i]) for i in range(len(jobs)) for s in labels]
        rows.append(f"| {name} | " + " | ".join(fmt.format(c) for c in cells) + " |")

    for category in CATEGORIES:
        row(f"{category} ms (calls)", lambda p, n, c=category: (p.parts.get(c, 0.0), p.calls.get(c, 0)),
            fmt="{0[0]:.1f} ({0[1]})")
    row("the rest: lookup, packing, adds, pooling, scheduling ms", lambda p, n: p.rest)
    row("graph construction (Python) ms", lambda p, n: p.build)
    row("**forward and pooling, ms**", lambda p, n: p.total)
    per_input = {job.name: len(job.texts) for job in jobs}
    cells = [f"{per_input[job.name] / (sides[s][i][0].total / 1e3):.0f}" for i, job in enumerate(jobs) for s in labels]
    rows.append("| inputs/s, this batch alone | " + " | ".join(cells) + " |")
    cells = []
    for i, job in enumerate(jobs):
        for s in labels:
            p, tokens = sides[s][i]
            cells.append(f"{matmul_flops(encoder, tokens) / (p.parts.get('matmul', float('nan')) / 1e3) / 1e9:.0f} / "
                         f"{matmul_flops(encoder, tokens) / (p.total / 1e3) / 1e9:.0f}")
    rows.append("| matmul GFLOP/s: in the matmuls / over the forward | " + " | ".join(cells) + " |")
    row("MLX primitives scheduled", lambda p, n: p.primitives, fmt="{}")
    return "\n".join(rows)
