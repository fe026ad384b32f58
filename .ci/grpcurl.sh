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
$G -d '{"text": "1 2 3 1 2 3 1 2", "speculation": {"mode": "SPECULATION_MODE_NGRAM", "num_draft_tokens": 4},
        "stopping": {"max_tokens": 5}}' "$ADDR" mlxgrpc.v1.InferenceService/Generate | grep -q FINISH_REASON_LENGTH
$G "$ADDR" describe mlxgrpc.v1.SpeculationOptions | grep -q num_draft_tokens
$G -d '{}' "$ADDR" mlxgrpc.v1.InferenceService/GetModelInfo | grep -q '"vocab_size": 640'
$G -d '{}' "$ADDR" mlxgrpc.v1.InferenceService/GetModelInfo | grep -q RESPONSE_FORMAT_KIND_JSON_SCHEMA
stream=$($G -d '{"text": "Answer:", "stopping": {"max_tokens": 16},
                 "response_format": {"json_schema": "{\"enum\": [\"yes\", \"no\"]}"}}' "$ADDR" mlxgrpc.v1.InferenceService/Generate)
grep -q FINISH_REASON_STOP <<<"$stream"  # complete: "yes" or "no", quoted
$G -d '{"inputs": ["A man is eating food."]}' "$ADDR" mlxgrpc.v1.InferenceService/Embed | grep -q '"tokens": 8'
$G "$ADDR" grpc.health.v1.Health/Check | grep -q SERVING
if $G -d '{"text": "x", "sampling": {"temperature": -1}}' "$ADDR" mlxgrpc.v1.InferenceService/Generate 2>err.txt; then
  exit 1
fi
grep -q InvalidArgument err.txt && grep -q sampling.temperature err.txt && rm -f err.txt
if $G -d '{"text": "x", "response_format": {"regex": "[a-"}}' "$ADDR" mlxgrpc.v1.InferenceService/Generate 2>err.txt; then
  exit 1
fi
grep -q InvalidArgument err.txt && grep -q response_format.regex err.txt && rm -f err.txt
set +x
echo "grpcurl checks passed"
