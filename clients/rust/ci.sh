#!/usr/bin/env bash
# CI for the Rust client: fetch crates, build (build.rs regenerates the code from
# ../../protos with the vendored protoc), run the example against the first server
# address, the agent example and the example's image step against the second (its
# "tools" and "vision" models) and the tests, live
# ones included, against each (arguments, default $MLXGRPC_ADDRESS; the servers must
# already be running). The Rerank, Classify and EmbedSparse tests need models named
# "reranker", "classifier" and "splade" (the second's), the image, video and audio tests models named
# "vision", "video" and "omni" (the second's), the speech tests (Transcribe) a model named "whisper"
# (the second's); the test of models at run time
# (live_models) a model named "llama" and --model-root over the fixture's models (the second's).
# The examples and the tests send $MLXGRPC_TOKEN when it is set (a server with a tokens
# file: an admin's token).
set -euo pipefail
ADDRESSES=("$@")
[[ ${#ADDRESSES[@]} -gt 0 ]] || ADDRESSES=("${MLXGRPC_ADDRESS:?pass or set the address of a running mlx-grpc server}")
cd "$(dirname "${BASH_SOURCE[0]}")"
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

echo "== example against ${ADDRESSES[0]}"
MLXGRPC_ADDRESS=${ADDRESSES[0]} cargo run --locked --quiet --example example

if [[ ${#ADDRESSES[@]} -gt 1 ]]; then
  # The second server is the test fixture, whose "tools" model calls tools.
  echo "== agent example against ${ADDRESSES[1]} (model tools)"
  MLXGRPC_ADDRESS=${ADDRESSES[1]} MLXGRPC_MODEL=tools timeout 120 "$CARGO_TARGET_DIR/debug/examples/agent"
  echo "== example's image step against ${ADDRESSES[1]} (model vision)"
  MLXGRPC_ADDRESS=${ADDRESSES[1]} MLXGRPC_MODEL=vision MLXGRPC_IMAGE="$PWD/../testdata/gradient.png" \
    timeout 120 "$CARGO_TARGET_DIR/debug/examples/example"
fi

# The live tests are #[ignore]d (a plain `cargo test` reports them ignored): --include-ignored runs them.
echo "== tests against ${ADDRESSES[0]} (live ones included)"
MLXGRPC_ADDRESS=${ADDRESSES[0]} cargo test --locked -- --include-ignored
for address in "${ADDRESSES[@]:1}"; do
  echo "== live tests against $address"
  MLXGRPC_ADDRESS=$address cargo test --locked --test live_generate --test live_calls --test retry_live --test live_priority \
    --test live_tools --test live_rerank --test live_classify --test live_sparse --test live_images --test live_videos \
    --test live_audio --test live_speech --test live_prediction --test live_models -- --include-ignored
done
