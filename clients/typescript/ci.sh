#!/usr/bin/env bash
# CI for the TypeScript client: install, check generated code, build, run the example
# against the first server address, the agent example and the example's image step
# against the second (its "tools" and "vision" models) and the tests against each
# (arguments, default $MLXGRPC_ADDRESS; already running: this script never starts one).
# The examples and the tests send $MLXGRPC_TOKEN when it is set (a server with a tokens
# file: an admin's token).
set -euo pipefail
ADDRESSES=("$@")
[[ ${#ADDRESSES[@]} -gt 0 || -z ${MLXGRPC_ADDRESS:-} ]] || ADDRESSES=("$MLXGRPC_ADDRESS")
cd "$(dirname "${BASH_SOURCE[0]}")"
CLIENT_DIR="$(pwd)"
REPO_ROOT="$(cd ../.. && pwd)"

echo "== install (npm ci, pinned by package-lock.json)"
npm ci --no-audit --no-fund --prefer-offline

echo "== check generated code is up to date"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$REPO_ROOT" && "$CLIENT_DIR/node_modules/.bin/buf" generate \
  --template clients/typescript/buf.gen.yaml --output "$tmp")
if ! diff -ru src/gen "$tmp/clients/typescript/src/gen"; then
  echo "src/gen is stale: run 'npm run generate' and commit the result" >&2
  exit 1
fi

echo "== build"
rm -rf dist
npx --no-install tsc -p tsconfig.json

if [[ ${#ADDRESSES[@]} -eq 0 ]]; then
  echo "== no server address: skipping the example; live tests will be skipped"
  node --test --test-concurrency=1 --test-reporter=spec dist/test/
  exit 0
fi
echo "== example against ${ADDRESSES[0]}"
MLXGRPC_ADDRESS=${ADDRESSES[0]} timeout 120 node dist/example.js
if [[ ${#ADDRESSES[@]} -gt 1 ]]; then
  echo "== agent example against ${ADDRESSES[1]} (model tools)"
  MLXGRPC_ADDRESS=${ADDRESSES[1]} MLXGRPC_MODEL=tools timeout 120 node dist/agent.js
  echo "== example's image step against ${ADDRESSES[1]} (model vision)"
  MLXGRPC_ADDRESS=${ADDRESSES[1]} MLXGRPC_MODEL=vision MLXGRPC_IMAGE="$REPO_ROOT/clients/testdata/gradient.png" \
    timeout 120 node dist/example.js
fi
echo "== tests against ${ADDRESSES[0]}"
MLXGRPC_ADDRESS=${ADDRESSES[0]} node --test --test-concurrency=1 --test-reporter=spec dist/test/
for address in "${ADDRESSES[@]:1}"; do
  echo "== live tests against $address"
  MLXGRPC_ADDRESS=$address node --test --test-concurrency=1 --test-reporter=spec dist/test/live.test.js \
    dist/test/formats.test.js dist/test/adapters.test.js dist/test/priority.test.js dist/test/tools.test.js \
    dist/test/rerank.test.js dist/test/classify.test.js dist/test/sparse.test.js dist/test/prefix.test.js dist/test/images.test.js \
    dist/test/models.test.js dist/test/speech.test.js
done
