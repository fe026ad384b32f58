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
$G -d '{}' "$ADDR" mlxgrpc.v1.InferenceService/GetLoad | grep -q '"max_running_requests": 4'
# SMG's worker contract, served beside ours on the same port
$G "$ADDR" list | grep -qx mlx.grpc.engine.MlxEngine
$G "$ADDR" mlx.grpc.engine.MlxEngine/HealthCheck | grep -q '"healthy": true'
$G -d '{"text": "Hello", "sampling_params": {"temperature": 0, "max_tokens": 3}}' "$ADDR" \
  mlx.grpc.engine.MlxEngine/Generate | grep -q '"finish_reason": "length"'
if $G -d '{"text": "x", "sampling": {"temperature": -1}}' "$ADDR" mlxgrpc.v1.InferenceService/Generate 2>err.txt; then
  exit 1
fi
grep -q InvalidArgument err.txt && grep -q sampling.temperature err.txt && rm -f err.txt
set +x
echo "grpcurl checks passed"
