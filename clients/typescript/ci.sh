#!/usr/bin/env bash
# CI for the TypeScript client: install, check generated code, build, run the
# example and the tests against the server at $MLXGRPC_ADDRESS (already running).
set -euo pipefail
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

if [[ -n "${MLXGRPC_ADDRESS:-}" ]]; then
  echo "== example against $MLXGRPC_ADDRESS"
  timeout 120 node dist/example.js
else
  echo "== MLXGRPC_ADDRESS is not set: skipping the example; live tests will be skipped"
fi

echo "== tests"
node --test --test-reporter=tap dist/test/
