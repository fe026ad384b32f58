"""The optimized BLAS preload (engine/hardware/blas.py): off, auto, and what the service reports.

Each BLAS setting runs in a fresh interpreter: the BLAS has to be loaded before
mlx is imported, and the test session's own process imported mlx long ago.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

REPO = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, sys, time
import engine
from engine.hardware import blas
import mlx.core as mx
a = mx.random.normal((512, 512)); b = mx.random.normal((512, 512)); mx.eval(a, b)
mx.eval(a @ b)
best = 1e9
for _ in range(int(sys.argv[1])):
    t = time.perf_counter(); mx.eval(a @ b); best = min(best, time.perf_counter() - t)
print(json.dumps({"active": blas.active(), "describe": blas.describe(), "gflops": 2 * 512**3 / best / 1e9}))
"""


def probe(setting: str, reps: int = 5, **env: str) -> dict:
    environ = {**os.environ, "MLX_GRPC_BLAS": setting, **env}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", PROBE, str(reps)], env=environ, cwd=REPO,
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_off_is_the_reference_blas():
    result = probe("off", reps=1)
    expected = "accelerate" if sys.platform == "darwin" else "reference"
    assert result["active"] == expected, result


def test_a_path_that_does_not_load_falls_back_to_reference():
    if sys.platform != "linux":
        pytest.skip("preloading is Linux-only")
    result = probe(str(REPO / "no-such-libblas.so"), reps=1)
    assert result["active"] == "reference", result


def test_auto_uses_the_optimized_blas_when_installed():
    if sys.platform != "linux":
        pytest.skip("preloading is Linux-only")
    auto = probe("auto")
    if auto["active"] == "reference":
        pytest.skip("no optimized BLAS installed (pip install 'mlx-grpc[blas]')")
    assert auto["active"] in ("mkl", "openblas", "blis"), auto
    off = probe("off", reps=2)
    assert off["active"] == "reference"
    # The reference BLAS runs 512^3 GEMMs at a few GFLOP/s; MKL/OpenBLAS at 50-200+.
    assert auto["gflops"] > 3 * off["gflops"], (auto, off)


def test_importing_mlx_first_reports_reference():
    if sys.platform != "linux":
        pytest.skip("preloading is Linux-only")
    code = "import mlx.core, engine; from engine.hardware import blas; print(blas.active())"
    environ = {**os.environ, "MLX_GRPC_BLAS": "auto",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code], env=environ, cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "reference"


async def test_model_info_reports_the_engines_blas_and_kernels(stub):
    from engine import kernels
    from engine.hardware import blas

    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"))).info
    library, _, cpu_kernels = info.blas.partition("; ")
    assert library == blas.active()
    assert cpu_kernels == kernels.status().describe()
