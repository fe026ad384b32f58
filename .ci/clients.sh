#!/usr/bin/env bash
# Starts two live servers the way a user would: the default one (bash scripts/serve.sh: the
# embedded SmolLM2 + MiniLM) and the test fixture ("llama", the tool-capable "tools", the
# image-taking "vision", the video-taking "video" (a tiny Qwen2.5-VL), the audio-taking "omni" (a
# tiny Qwen3-Omni), the speech model
# "whisper", MiniLM, the cross-encoder "reranker", the sequence classifiers
# "classifier" and "classifier-multi" and the SPLADE model "splade"), each with an adapter. Every client's agent example
# runs against the "tools" model.
# Then the grpcurl checks (reflection only, no proto files) against both, every client's
# ci.sh (example against the default server, tests against both), and every README's
# outside-consumer recipe. Both servers take a tokens file, as a shared server would: every
# client's examples, live tests and recipe send its one admin token ($MLXGRPC_TOKEN; its
# tenant, $MLXGRPC_TENANT, is the one their GetLoad checks look for), since the adapter
# tests load adapters. A third server, with a tokens file of all three roles, holds the
# roles (.ci/grpcurl_roles.sh). Last, every client's tests run once more against the default
# server restarted plainly, exactly as the README starts it.
set -euo pipefail
cd "$(dirname "$0")/.."
DEFAULT_PORT=${MLXGRPC_PORT:-50051}
FIXTURE_PORT=$((DEFAULT_PORT + 1))
TOKENED_PORT=$((DEFAULT_PORT + 2))
DEFAULT="localhost:$DEFAULT_PORT"
FIXTURE="localhost:$FIXTURE_PORT"
TOKENED="localhost:$TOKENED_PORT"
# A live test that cannot run (no server, no embedding model, no adapter) fails instead of skipping.
export MLXGRPC_REQUIRE_LIVE=1
WORK=$(mktemp -d)
.venv/bin/python -m tests.fixtures "$WORK/models" >/dev/null
# The two client servers' tokens file: one admin token (an admin may call everything an
# inference caller may), read by every client's examples and live tests from the environment.
export MLXGRPC_TOKEN=ci-admin MLXGRPC_TENANT=ci
printf '%s %s admin\n' "$MLXGRPC_TOKEN" "$MLXGRPC_TENANT" >"$WORK/client-tokens"
# Each server starts with an adapter "tone" (random LoRA weights shaped for its model), so
# the adapter checks and every client's adapter tests run against both. Both adapters lie
# under $WORK, each server's --adapter-root: ListAdapters shows their source relative to
# it (default-tone, models/adapters/tone), which the tests LoadAdapter again.
DEFAULT_MODEL=$(.venv/bin/python -c 'from engine.loading.embedded import default_generation_model as m; print(m())')
MINILM=$(.venv/bin/python -c 'from engine.loading.embedded import default_embedding_model as m; print(m())')
.venv/bin/python -m tests.fixtures.adapters "$DEFAULT_MODEL" "$WORK/default-tone" >/dev/null
# A short admission queue, so the clients' retry tests fill it in a moment.
bash scripts/serve.sh --host 127.0.0.1 --port "$DEFAULT_PORT" --max-queued 8 --grace 5 \
  --auth-token-file "$WORK/client-tokens" --adapter-root "$WORK" --adapter "tone=$WORK/default-tone" >"$WORK/default.log" 2>&1 &
DEFAULT_PID=$!
.venv/bin/mlx-grpc serve --host 127.0.0.1 --port "$FIXTURE_PORT" --model "llama=$WORK/models/llama" \
  --model "tools=$WORK/models/tools-qwen" --model "vision=$WORK/models/llava" \
  --model "video=$WORK/models/qwen2_5_vl" --model "omni=$WORK/models/qwen3_omni" --speech-model "whisper=$WORK/models/whisper" \
  --embedding-model "all-minilm-l6-v2=$MINILM" --embedding-model "reranker=$WORK/models/reranker" \
  --embedding-model "classifier=$WORK/models/classifier" \
  --embedding-model "classifier-multi=$WORK/models/classifier-multi" \
  --embedding-model "splade=$WORK/models/splade" \
  --adapter-root "$WORK" --adapter "tone=$WORK/models/adapters/tone" --model-root "$WORK/models" \
  --max-active 4 --max-queued 16 --grace 5 --auth-token-file "$WORK/client-tokens" >"$WORK/fixture.log" 2>&1 &
FIXTURE_PID=$!
printf 'ci-app app inference\nci-router gateway router\nci-ops ops admin\n' >"$WORK/tokens"
.venv/bin/mlx-grpc serve --host 127.0.0.1 --port "$TOKENED_PORT" --model "llama=$WORK/models/llama" \
  --no-embedding --adapter-root "$WORK" --auth-token-file "$WORK/tokens" --auth-open-reflection \
  --grace 5 >"$WORK/tokened.log" 2>&1 &
TOKENED_PID=$!
trap 'kill $DEFAULT_PID $FIXTURE_PID $TOKENED_PID 2>/dev/null || true; wait 2>/dev/null || true' EXIT
.venv/bin/python .ci/wait_healthy.py "$FIXTURE" 120 || { cat "$WORK/fixture.log"; exit 1; }
.venv/bin/python .ci/wait_healthy.py "$TOKENED" 120 || { cat "$WORK/tokened.log"; exit 1; }
.venv/bin/python .ci/wait_healthy.py "$DEFAULT" 300 || { cat "$WORK/default.log"; exit 1; }

for address in "$DEFAULT" "$FIXTURE"; do
  bash .ci/grpcurl.sh "$address" "$MLXGRPC_TOKEN"
done
bash .ci/grpcurl_roles.sh "$TOKENED" models/adapters/tone
kill -TERM $TOKENED_PID && wait $TOKENED_PID
for lang in python go typescript rust java; do
  printf '\n--- client: %s (%ss)\n' "$lang" "$SECONDS"
  bash "clients/$lang/ci.sh" "$DEFAULT" "$FIXTURE"
done
printf '\n--- outside-consumer recipes (%ss)\n' "$SECONDS"
bash .ci/consumers.sh "$DEFAULT"

# Once more against the default server as the README starts it (bash scripts/serve.sh: no
# tokens file, no --adapter-root, no adapter), every client's tests from what the steps above
# built (nothing is built again). Without a token, and with MLXGRPC_REQUIRE_LIVE=0: a test
# this server cannot run (adapters, the fixture's models) skips and says why.
printf '\n--- every client against the plain default server (%ss)\n' "$SECONDS"
kill -TERM $DEFAULT_PID && wait $DEFAULT_PID
bash scripts/serve.sh --host 127.0.0.1 --port "$DEFAULT_PORT" >"$WORK/plain.log" 2>&1 &
DEFAULT_PID=$!
.venv/bin/python .ci/wait_healthy.py "$DEFAULT" 300 || { cat "$WORK/plain.log"; exit 1; }
for lang in python go typescript rust java; do
  printf '\n--- plain server: %s (%ss)\n' "$lang" "$SECONDS"
  (
    cd "clients/$lang"
    unset MLXGRPC_TOKEN MLXGRPC_TENANT
    export MLXGRPC_ADDRESS=$DEFAULT MLXGRPC_REQUIRE_LIVE=0
    case $lang in
      python) .venv/bin/python -m pytest -ra -p no:cacheprovider tests ;;
      go) GOFLAGS=-buildvcs=false go test -count=1 ./... ;;
      typescript) node --test --test-concurrency=1 --test-reporter=spec dist/test/ ;;
      rust) CARGO_TARGET_DIR="$PWD/target" CARGO_TERM_COLOR=never cargo test --locked -- --include-ignored ;;
      java) mvn -B -ntp -Dstyle.color=never ${MVN_ARGS:-} surefire:test ;;
    esac
  )
done

kill -TERM $DEFAULT_PID $FIXTURE_PID
wait $DEFAULT_PID && wait $FIXTURE_PID && echo "servers drained and exited 0"
trap - EXIT
