#!/usr/bin/env bash
# CI for the Rust client: fetch crates, build (build.rs regenerates the code from
# ../../protos with the vendored protoc), run the example and the live tests
# against the server at $MLXGRPC_ADDRESS (which must already be running).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

: "${MLXGRPC_ADDRESS:?set MLXGRPC_ADDRESS to a running mlx-grpc server (host:port)}"
export CARGO_TARGET_DIR="$PWD/target"
export CARGO_TERM_COLOR=never

echo "== toolchain"
cargo --version
rustc --version

echo "== fetch crates (reuses ~/.cargo when present)"
cargo fetch --locked

echo "== generated code is not checked in; build.rs regenerates it from ../../protos"
if find . -path ./target -prune -o -name 'mlxgrpc.v1.rs' -print | grep -q .; then
  echo "generated mlxgrpc.v1.rs found in the source tree; it must only live in OUT_DIR" >&2
  exit 1
fi

echo "== build"
cargo build --locked --all-targets
generated=$(ls "$CARGO_TARGET_DIR"/debug/build/mlx-grpc-client-*/out/mlxgrpc.v1.rs | head -n1)
grep -q 'pub struct GenerateRequest' "$generated"
grep -q 'pub struct InferenceServiceClient' "$generated"
echo "generated: $generated"

echo "== example against $MLXGRPC_ADDRESS"
cargo run --locked --quiet --example example

echo "== tests against $MLXGRPC_ADDRESS"
cargo test --locked
