#!/usr/bin/env bash
# CI for the Go client: install tools, check generated code, build, run the
# example against $MLXGRPC_ADDRESS, run the tests. Does not start a server.
set -euo pipefail
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

if [[ -z ${MLXGRPC_ADDRESS:-} ]]; then
  step "MLXGRPC_ADDRESS is not set: skipping the example; live tests will skip"
else
  step "example against $MLXGRPC_ADDRESS"
  timeout 120 "$TOOLS/bin/example"
fi

step "tests"
go test -count=1 -v ./...
step "done"
