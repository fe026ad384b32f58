#!/usr/bin/env bash
# CI for the Java client: regenerate code from ../../protos, build, run the example against the
# first server address, the agent example and the example's image step against the second (its
# "tools" and "vision" models) and the tests against each (arguments, default $MLXGRPC_ADDRESS).
# The examples and the tests send $MLXGRPC_TOKEN when it is set (a server with a tokens file:
# an admin's token).
# Needs Java 17+ and Maven 3.8+; Maven downloads everything else (protoc, protoc-gen-grpc-java,
# libraries) from Maven Central into ~/.m2 (reused when present). Extra Maven arguments can be passed in MVN_ARGS, e.g.
# MVN_ARGS=-Dmaven.repo.local=/tmp/m2-cold.
set -euo pipefail
ADDRESSES=("$@")
[[ ${#ADDRESSES[@]} -gt 0 || -z ${MLXGRPC_ADDRESS:-} ]] || ADDRESSES=("$MLXGRPC_ADDRESS")
cd "$(dirname "${BASH_SOURCE[0]}")"

command -v java >/dev/null || { echo "ci.sh: java not found (need JDK 17+)" >&2; exit 1; }
command -v mvn >/dev/null || { echo "ci.sh: mvn not found (need Maven 3.8+)" >&2; exit 1; }

# shellcheck disable=SC2206
MVN=(mvn -B -ntp -Dstyle.color=never ${MVN_ARGS:-})
start=$SECONDS


echo "== generate + build (protoc and protoc-gen-grpc-java from Maven Central)"
"${MVN[@]}" -q clean test-compile

echo "== check generated code"
gen=target/generated-sources/protobuf
for f in "$gen/grpc-java/dev/mlxgrpc/v1/InferenceServiceGrpc.java" \
         "$gen/java/dev/mlxgrpc/v1/GenerateRequest.java" \
         "$gen/java/dev/mlxgrpc/v1/ModelInfo.java"; do
  [[ -s "$f" ]] || { echo "ci.sh: missing generated file $f" >&2; exit 1; }
done
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Generated code is never checked in: it is produced from ../../protos on every build.
  tracked=$(git ls-files -- target 'src/main/java/dev/mlxgrpc/v1' || true)
  if [[ -n "$tracked" ]]; then
    echo "ci.sh: generated files are tracked in git (they must not be):" >&2
    echo "$tracked" >&2
    exit 1
  fi
  # The build must not modify tracked files.
  git diff --exit-code -- . >/dev/null || { echo "ci.sh: the build changed tracked files" >&2; git diff --stat -- . >&2; exit 1; }
fi
echo "generated $(find "$gen" -name '*.java' | wc -l) Java files from ../../protos"

if [[ ${#ADDRESSES[@]} -eq 0 ]]; then
  echo "== no server address: skipping the example; the live tests will skip"
  "${MVN[@]}" surefire:test
else
  echo "== example against ${ADDRESSES[0]} (plain java, as the README runs it)"
  MLXGRPC_ADDRESS=${ADDRESSES[0]} java -cp "target/classes:$(cat target/classpath.txt)" dev.mlxgrpc.client.Example
  if [[ ${#ADDRESSES[@]} -gt 1 ]]; then
    echo "== agent example against ${ADDRESSES[1]} (model tools)"
    MLXGRPC_ADDRESS=${ADDRESSES[1]} MLXGRPC_MODEL=tools timeout 120 \
      java -cp "target/classes:$(cat target/classpath.txt)" dev.mlxgrpc.client.Agent
    echo "== example's image step against ${ADDRESSES[1]} (model vision)"
    MLXGRPC_ADDRESS=${ADDRESSES[1]} MLXGRPC_MODEL=vision MLXGRPC_IMAGE="$PWD/../testdata/gradient.png" timeout 120 \
      java -cp "target/classes:$(cat target/classpath.txt)" dev.mlxgrpc.client.Example
  fi
  echo "== tests against ${ADDRESSES[0]}"
  MLXGRPC_ADDRESS=${ADDRESSES[0]} "${MVN[@]}" surefire:test
  for address in "${ADDRESSES[@]:1}"; do
    echo "== live tests against $address"
    MLXGRPC_ADDRESS=$address "${MVN[@]}" surefire:test -Dtest='MlxGrpcClientTest,RetryLiveTest,ResponseFormatsTest,PriorityTest,ToolsTest,RerankTest,ClassifyTest,SparseTest,PrefixCacheTest,ImagesTest,VideosTest,AudioPartsTest,SpeechTest,ModelsTest'
  done
fi

echo "ci.sh: OK in $((SECONDS - start)) s"
