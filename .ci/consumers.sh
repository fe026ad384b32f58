#!/usr/bin/env bash
# Runs every client README's "use it from your own project" recipe (the sh block after
# "<!-- ci: consumer -->") exactly as written, each in an empty temporary directory,
# against the server at $1 (default $MLXGRPC_ADDRESS), with its bearer token from
# $MLXGRPC_TOKEN when that is set. MLXGRPC is this checkout.
# Extra arguments pick languages (default: all five).
set -euo pipefail
cd "$(dirname "$0")/.."
export MLXGRPC=$PWD MLXGRPC_ADDRESS=${1:-${MLXGRPC_ADDRESS:?server address}}
shift || true
langs=("$@")
[[ ${#langs[@]} -gt 0 ]] || langs=(python go typescript rust java)
for lang in "${langs[@]}"; do
  readme="clients/$lang/README.md"
  recipe=$(awk '/<!-- ci: consumer -->/ {marked=1; next}
                marked && /^```sh$/ {inside=1; next}
                inside && /^```$/ {exit}
                inside {print}' "$readme")
  [[ -n $recipe ]] || { echo "no consumer recipe in $readme" >&2; exit 1; }
  dir=$(mktemp -d)
  printf '\n--- %s consumer recipe in %s (%ss)\n' "$lang" "$dir" "$SECONDS"
  (cd "$dir" && bash -euo pipefail -c "$recipe")
  rm -rf "$dir"
done
echo "consumer recipes passed: ${langs[*]}"
