#!/usr/bin/env bash
# Starts one live server on a fixture model (plus the embedded MiniLM), then runs
# the grpcurl checks (reflection only, no proto files) and every client's ci.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${MLXGRPC_PORT:-50051}
export MLXGRPC_ADDRESS="localhost:$PORT"
WORK=$(mktemp -d)
.venv/bin/python -m tests.fixtures "$WORK/models" >/dev/null
# The server starts with adapter "tone"; clients load and unload MLXGRPC_ADAPTER_DIR themselves.
export MLXGRPC_ADAPTER_DIR="$WORK/models/adapters/small"
.venv/bin/mlx-grpc serve --host 127.0.0.1 --port "$PORT" --model "llama=$WORK/models/llama" \
  --adapter "tone=$WORK/models/adapters/tone" \
  --max-active 4 --max-queued 16 --grace 5 >"$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
.venv/bin/python .ci/wait_healthy.py "$MLXGRPC_ADDRESS" 120 || { cat "$WORK/server.log"; exit 1; }

bash .ci/grpcurl.sh "$MLXGRPC_ADDRESS"
for lang in python go typescript rust java; do
  if [ -f "clients/$lang/ci.sh" ]; then
    printf '\n--- client: %s (%ss)\n' "$lang" "$SECONDS"
    bash "clients/$lang/ci.sh"
  fi
done

kill -TERM $SERVER
wait $SERVER && echo "server drained and exited 0"
trap - EXIT
