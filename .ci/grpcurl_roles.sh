#!/usr/bin/env bash
# grpcurl against a server with a tokens file (tokens ci-app: inference, ci-router: router,
# ci-ops: admin; reflection open): each role calls what it may and is refused, before the
# request is parsed, what it may not. $2: an adapter directory under the server's adapter root.
set -euo pipefail
ADDR=$1 ADAPTER=$2
export GOBIN=${GOBIN:-$HOME/go/bin}
[ -x "$GOBIN/grpcurl" ] || go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4
G="$GOBIN/grpcurl -plaintext"
S=mlxgrpc.v1.InferenceService
V=vllm.grpc.engine.VllmEngine
has() { grep "$@" >/dev/null; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
as() { local token=$1; shift; $G -H "authorization: Bearer $token" "$@"; }
# refused: token, the role the message names, then grpcurl's arguments
refused() {
  local token=$1 role=$2; shift 2
  if as "$token" "$@" >"$OUT/refused.txt" 2>&1; then echo "allowed: $*"; exit 1; fi
  has PermissionDenied "$OUT/refused.txt" && has "with the $role" "$OUT/refused.txt"
}
set -x
if $G -d '{}' "$ADDR" $S/ListModels 2>"$OUT/err.txt"; then exit 1; fi  # no token
has Unauthenticated "$OUT/err.txt"
as ci-app -d '{"text": "Hello", "stopping": {"max_tokens": 3, "ignore_eos": true}}' "$ADDR" $S/Generate \
  | has FINISH_REASON_LENGTH
refused ci-app "admin role" -d "{\"name\": \"x\", \"path\": \"$ADAPTER\"}" "$ADDR" $S/LoadAdapter
refused ci-router "admin role" -d "{\"name\": \"x\", \"path\": \"$ADAPTER\"}" "$ADDR" $S/LoadAdapter
refused ci-app "router or admin role" -d '{}' "$ADDR" $V/FlushCache
refused ci-app "router or admin role" -max-time 5 -d '{"load_records_before_first_batch": true}' \
  "$ADDR" $V/SubscribeKvEvents
# paths only for admins
as ci-app -d '{}' "$ADDR" $S/ListModels >"$OUT/models.json"
if has '"source"' "$OUT/models.json"; then exit 1; fi
as ci-ops -d '{}' "$ADDR" $S/ListModels | has '"source"'
# the router: KV events (the first record arrives at once; the stream runs until -max-time) and FlushCache
as ci-router -max-time 3 -d '{"load_records_before_first_batch": true}' "$ADDR" $V/SubscribeKvEvents \
  >"$OUT/events.json" 2>&1 || true
has '"maxRunningRequests"\|"max_running_requests"' "$OUT/events.json"
as ci-router -d '{}' "$ADDR" $V/FlushCache | has '"success": true'
# the admin: adapters
as ci-ops -d "{\"name\": \"by-admin\", \"path\": \"$ADAPTER\"}" "$ADDR" $S/LoadAdapter | has '"name": "by-admin"'
as ci-ops -d '{"name": "by-admin"}' "$ADDR" $S/UnloadAdapter | has by-admin
set +x
echo "role checks passed against $ADDR"
