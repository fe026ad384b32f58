"""The kernels' quantized products alone, at a realistic size: ms per product and the
bytes/s it reads, per code width and input row count, against the machine's read bandwidth.

    .venv/bin/python -m bench.products                     # 2048x8192 (a 1B MLP), 4/5/6/8 bits
    .venv/bin/python -m bench.products --shape 8192x2048 --rows 1,8 --reps 5

Each width gets eight weight matrices (float16 scales and biases, as GGUF files load),
together far larger than the caches, and each timing is one pass over all eight. One row
is timed twice, on the integer-dot path and with it turned off (MLX_GRPC_INT_MATVEC=off:
the float kernel), each side in its own process, the sides alternating; a figure is the
best of --reps. Row counts up to 12 run the packed-code kernel, more go through the BLAS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

from .common import machine_facts

MATRICES = 8


def read_bandwidth(nbytes: int = 1 << 30) -> float:
    """Bytes/s of a streaming read over all cores (numpy sums of a buffer far past the L3)."""
    import numpy as np

    a = np.ones(nbytes // 4, dtype=np.float32)
    threads = os.cpu_count() or 1
    best = float("inf")
    for _ in range(4):
        parts = [threading.Thread(target=lambda i=i: a[i * len(a) // threads:(i + 1) * len(a) // threads].sum())
                 for i in range(threads)]
        start = time.perf_counter()
        for t in parts:
            t.start()
        for t in parts:
            t.join()
        best = min(best, time.perf_counter() - start)
    return nbytes / best


def child(shape: tuple[int, int], bits: int, rows: list[int]) -> None:
    """One side: per row count, seconds of one pass over the matrices, as JSON lines."""
    import engine  # noqa: F401  - BLAS before mlx
    import mlx.core as mx

    from engine.kernels import ext

    K, N = shape
    mx.random.seed(bits)
    mats = []
    for _ in range(MATRICES):
        wq, s, b = mx.quantize(mx.random.normal((N, K)) * 0.02, group_size=32, bits=bits)
        mats.append((wq, s.astype(mx.float16), b.astype(mx.float16)))
    mx.eval(mats)
    print(json.dumps({"int_bits": list(ext().int_matvec())}), flush=True)
    nbytes = sum(a.nbytes for m in mats for a in m)
    for r in rows:
        x = mx.random.normal((r, K))
        mx.eval(x)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            mx.eval([ext().quantized_matmul(x, *m, 32, bits) for m in mats])
            best = min(best, time.perf_counter() - start)
        print(json.dumps({"rows": r, "seconds": best / MATRICES, "bytes": nbytes / MATRICES}), flush=True)


def side(shape, bits: int, rows: list[int], int_path: bool) -> tuple[dict[int, tuple[float, int]], bool]:
    """Per row count (seconds, bytes per product), and whether one row took the integer path."""
    env = {**os.environ, "MLX_GRPC_INT_MATVEC": "on" if int_path else "off"}
    argv = [sys.executable, "-m", "bench.products", "--child", "--shape", f"{shape[0]}x{shape[1]}",
            "--bits", str(bits), "--rows", ",".join(map(str, rows))]
    lines = [json.loads(line) for line in subprocess.run(argv, env=env, capture_output=True, text=True,
                                                         check=True).stdout.splitlines() if line.strip()]
    return ({d["rows"]: (d["seconds"], d["bytes"]) for d in lines if "rows" in d},
            bits in lines[0]["int_bits"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.products", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="2048x8192", help="KxN: input width x outputs")
    p.add_argument("--bits", default="4,5,6,8")
    p.add_argument("--rows", default="1,2,4,8,12,16,32")
    p.add_argument("--reps", type=int, default=3, help="processes per side; each figure is the best")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shape = tuple(int(v) for v in args.shape.lower().split("x"))
    rows = [int(r) for r in args.rows.split(",")]
    if args.child:
        child(shape, int(args.bits), rows)
        return 0
    facts = machine_facts()
    print(f"machine: {facts.get('machine', '')}; read bandwidth (all cores): {read_bandwidth() / 1e9:.1f} GB/s")
    print(f"shape {shape[0]}x{shape[1]}, {MATRICES} matrices per pass, float16 scales\n")
    print("| bits | rows | ms per product | GB/s read | GMAC/s | one row, integer path off: ms |")
    print("|---|---|---|---|---|---|")
    for bits in (int(b) for b in args.bits.split(",")):
        best: dict[tuple[int, bool], float] = {}
        size, taken = 0, False
        for rep in range(args.reps):
            for int_path in ((True, False) if rep % 2 == 0 else (False, True)):
                times, took = side(shape, bits, rows if int_path else [1], int_path)
                taken = taken or (int_path and took)
                for r, (sec, size) in times.items():
                    best[r, int_path] = min(best.get((r, int_path), float("inf")), sec)
        for r in rows:
            sec = best[r, True]
            off = "" if r != 1 else f"{best[1, False] * 1e3:.3f}" + ("" if taken else " (no integer path here)")
            print(f"| {bits} | {r} | {sec * 1e3:.3f} | {size / sec / 1e9:.1f} | "
                  f"{r * shape[0] * shape[1] / sec / 1e9:.1f} | {off} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
