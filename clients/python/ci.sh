#!/usr/bin/env bash
# CI for the Python client: fresh venv, install the distribution on its own, check the
# generated code, run the example against the first server address, the agent example
# against the second (its "tools" model), and the tests against each (the tools, rerank,
# classify, sparse, image, video, audio and speech tests need the second's "tools", "reranker",
# "classifier", "splade", "vision", "video", "omni" and "whisper" models,
# the model lifecycle tests its "llama" and its --model-root;
# arguments, default $MLXGRPC_ADDRESS; already running: this script never starts one).
# The example and the tests send $MLXGRPC_TOKEN when it is set (a server with a tokens
# file: an admin's token).
set -euo pipefail
ADDRESSES=("$@")
[[ ${#ADDRESSES[@]} -gt 0 || -z ${MLXGRPC_ADDRESS:-} ]] || ADDRESSES=("$MLXGRPC_ADDRESS")
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT="$(cd ../.. && pwd)"
HERE="$(pwd)"

PYTHON="${PYTHON:-python3}"
GRPCIO_TOOLS_VERSION=1.85.1   # must match the generated code (service/codegen.py's toolchain)
PYTEST_VERSION=9.2.0
PYTEST_ASYNCIO_VERSION=1.5.0

# Our own environment only: never the repository's .venv or anything on PYTHONPATH.
unset VIRTUAL_ENV PYTHONPATH PYTHONHOME || true
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

echo "== fresh venv in clients/python/.venv"
rm -rf .venv build src/*.egg-info  # stale build outputs would leak into the wheel
"$PYTHON" -m venv .venv
PY="$HERE/.venv/bin/python"

echo "== pip install ./clients/python (non-editable) + test tools"
"$PY" -m pip install -q . "pytest==$PYTEST_VERSION" "pytest-asyncio==$PYTEST_ASYNCIO_VERSION"
"$PY" -m pip check
# The installed distribution works on its own: imported from site-packages, not the source tree.
(cd / && "$PY" -c 'import mlxgrpc_client, sys; assert "site-packages" in mlxgrpc_client.__file__, mlxgrpc_client.__file__; print("mlxgrpc_client from", mlxgrpc_client.__file__)')

echo "== generated code is up to date (grpcio-tools==$GRPCIO_TOOLS_VERSION)"
"$PY" -m pip install -q "grpcio-tools==$GRPCIO_TOOLS_VERSION"
(cd "$ROOT" && "$PY" -m service.codegen --check \
    --out clients/python/src/mlxgrpc_client/gen --package mlxgrpc_client.gen)

if [[ ${#ADDRESSES[@]} -eq 0 ]]; then
  echo "== no server address: skipping the example; the live tests will skip"
  "$PY" -m pytest -ra tests
  exit 0
fi
echo "== example against ${ADDRESSES[0]}"
MLXGRPC_ADDRESS=${ADDRESSES[0]} "$PY" examples/example.py
echo "== tests against ${ADDRESSES[0]}"
MLXGRPC_ADDRESS=${ADDRESSES[0]} "$PY" -m pytest -ra -p no:cacheprovider tests
if [[ ${#ADDRESSES[@]} -gt 1 ]]; then
  echo "== agent example against ${ADDRESSES[1]} (model tools)"
  MLXGRPC_ADDRESS=${ADDRESSES[1]} MLXGRPC_MODEL=tools timeout 120 "$PY" examples/agent.py
  echo "== example's image step against ${ADDRESSES[1]} (model vision)"
  MLXGRPC_ADDRESS=${ADDRESSES[1]} MLXGRPC_MODEL=vision MLXGRPC_IMAGE="$ROOT/clients/testdata/gradient.png" \
    timeout 120 "$PY" examples/example.py
fi
for address in "${ADDRESSES[@]:1}"; do
  echo "== live tests against $address"
  MLXGRPC_ADDRESS=$address "$PY" -m pytest -ra -p no:cacheprovider tests/test_sync.py tests/test_aio.py \
    tests/test_adapters.py tests/test_models.py tests/test_tools.py tests/test_rerank.py tests/test_classify.py \
    tests/test_embed_sparse.py tests/test_images.py tests/test_videos.py tests/test_audio.py tests/test_transcribe.py
done
