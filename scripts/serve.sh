#!/usr/bin/env bash
# Sets up .venv if needed, then serves the embedded default models on :50051.
# Extra arguments go to `mlx-grpc serve` (see `mlx-grpc serve --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/mlx-grpc serve "$@"
