#!/usr/bin/env bash
# grpcurl against the live server with no proto files (reflection only).
set -euo pipefail
ADDR=$1
export GOBIN=${GOBIN:-$HOME/go/bin}
[ -x "$GOBIN/grpcurl" ] || go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4
G="$GOBIN/grpcurl -plaintext"
set -x
$G "$ADDR" list | grep -qx mlxgrpc.v1.InferenceService
$G "$ADDR" describe mlxgrpc.v1.InferenceService | grep -q "rpc Generate"
$G "$ADDR" describe mlxgrpc.v1.GenerateRequest | grep -q "Sampling"
stream=$($G -d '{"text": "Hello", "stopping": {"max_tokens": 5}}' "$ADDR" mlxgrpc.v1.InferenceService/Generate)
echo "$stream"
grep -q FINISH_REASON_LENGTH <<<"$stream"
$G -d '{}' "$ADDR" mlxgrpc.v1.InferenceService/GetModelInfo | grep -q '"vocab_size": 640'
$G -d '{"inputs": ["A man is eating food."]}' "$ADDR" mlxgrpc.v1.InferenceService/Embed | grep -q '"tokens": 8'
$G "$ADDR" grpc.health.v1.Health/Check | grep -q SERVING
if $G -d '{"text": "x", "sampling": {"temperature": -1}}' "$ADDR" mlxgrpc.v1.InferenceService/Generate 2>err.txt; then
  exit 1
fi
grep -q InvalidArgument err.txt && grep -q sampling.temperature err.txt && rm -f err.txt
# adapters: "tone" is loaded at start; MLXGRPC_ADAPTER_DIR is loaded and unloaded here
$G "$ADDR" describe mlxgrpc.v1.InferenceService | grep -q "rpc LoadAdapter"
$G -d '{}' "$ADDR" mlxgrpc.v1.InferenceService/ListAdapters | grep -q '"name": "tone"'
$G -d '{"text": "Hello", "adapter": "tone", "stopping": {"max_tokens": 5}}' "$ADDR" \
  mlxgrpc.v1.InferenceService/Generate | grep -q FINISH_REASON_LENGTH
$G -d "{\"name\": \"by-grpcurl\", \"path\": \"$MLXGRPC_ADAPTER_DIR\"}" "$ADDR" \
  mlxgrpc.v1.InferenceService/LoadAdapter | grep -q ADAPTER_KIND_LORA
$G -d '{"name": "by-grpcurl"}' "$ADDR" mlxgrpc.v1.InferenceService/UnloadAdapter | grep -q by-grpcurl
set +x
echo "grpcurl checks passed"
