#!/usr/bin/env bash
# CI for the Go client: install tools, check generated code, build, run the example
# against the first server address, the agent example and the example's image step
# against the second (its "tools" and "vision" models) and the tests against each
# (arguments, default $MLXGRPC_ADDRESS). Does not start a server. The examples and the
# tests send $MLXGRPC_TOKEN when it is set (a server with a tokens file: an admin's token).
set -euo pipefail
ADDRESSES=("$@")
[[ ${#ADDRESSES[@]} -gt 0 || -z ${MLXGRPC_ADDRESS:-} ]] || ADDRESSES=("$MLXGRPC_ADDRESS")
cd "$(dirname "${BASH_SOURCE[0]}")"
HERE=$PWD
ROOT=$(cd ../.. && pwd)
BUF_VERSION=1.75.0
TOOLS=$HERE/.tools
BUF=$TOOLS/node_modules/.bin/buf
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
start=$SECONDS
step() { printf '\n== %s (%ds)\n' "$*" $((SECONDS - start)); }

step "install buf $BUF_VERSION (npm) and Go modules"
if [[ ! -x $BUF ]] || [[ "$("$BUF" --version 2>/dev/null)" != "$BUF_VERSION" ]]; then
  npm install --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
    --prefix "$TOOLS" "@bufbuild/buf@$BUF_VERSION"
fi
"$BUF" --version
go mod download
go mod verify

step "regenerate code and compare with mlxgrpc/v1"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
# Plugins are protoc-gen-go / protoc-gen-go-grpc pinned in go.mod and run with `go tool`.
(cd "$ROOT" && "$BUF" generate --template buf.gen.yaml -o "$gen")
if ! diff -r "$gen/clients/go/mlxgrpc/v1" mlxgrpc/v1; then
  echo "generated code is stale: run 'buf generate' from the repo root" >&2
  exit 1
fi

step "gofmt, vet, build"
unformatted=$(gofmt -l mlxgrpc cmd)
if [[ -n $unformatted ]]; then echo "not gofmt-ed: $unformatted" >&2; exit 1; fi
go vet ./...
go build -o "$TOOLS/bin/example" ./cmd/example
go build -o "$TOOLS/bin/agent" ./cmd/agent

if [[ ${#ADDRESSES[@]} -eq 0 ]]; then
  step "no server address: skipping the example; live tests will skip"
  go test -count=1 -v ./...
else
  step "example against ${ADDRESSES[0]}"
  MLXGRPC_ADDRESS=${ADDRESSES[0]} timeout 120 "$TOOLS/bin/example"
  if [[ ${#ADDRESSES[@]} -gt 1 ]]; then
    # The second server is the test fixture, whose "tools" model calls tools.
    step "agent example against ${ADDRESSES[1]} (model tools)"
    MLXGRPC_ADDRESS=${ADDRESSES[1]} MLXGRPC_MODEL=tools timeout 120 "$TOOLS/bin/agent"
    # ... and its "vision" model takes images: the example's image step.
    step "example's image step against ${ADDRESSES[1]} (model vision)"
    MLXGRPC_ADDRESS=${ADDRESSES[1]} MLXGRPC_MODEL=vision MLXGRPC_IMAGE="$ROOT/clients/testdata/gradient.png" \
      timeout 120 "$TOOLS/bin/example"
  fi
  for address in "${ADDRESSES[@]}"; do
    step "tests against $address"
    MLXGRPC_ADDRESS=$address go test -count=1 -v ./...
  done
fi
step "done"
