#!/usr/bin/env bash
# Sets up .venv if needed, then runs the Python test suite (engine and service).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
