#!/usr/bin/env bash
# grpcurl against a live server with no proto files (reflection only): the README's commands,
# on whatever models the server serves. The Cancel example runs as the README shows it: a
# long generation in the background ("another terminal"), cancelled by its request id.
# $2 (default $MLXGRPC_TOKEN), when given, is sent as "authorization: Bearer" on every call,
# reflection included; an admin's token, since the checks load adapters and read their paths.
set -euo pipefail
ADDR=$1 TOKEN=${2:-${MLXGRPC_TOKEN:-}}
export GOBIN=${GOBIN:-$HOME/go/bin}
[ -x "$GOBIN/grpcurl" ] || go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4
AUTH=()
[ -z "$TOKEN" ] || AUTH=(-H "authorization: Bearer $TOKEN")
G() { "$GOBIN/grpcurl" -plaintext "${AUTH[@]}" "$@"; }
S=mlxgrpc.v1.InferenceService
# grep -q stops reading at its first match; under pipefail the writer's SIGPIPE would
# then fail the line, so a piped check reads its input to the end.
has() { grep "$@" >/dev/null; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
set -x
G "$ADDR" list | has -x $S
G "$ADDR" describe $S | has "rpc Generate"
G "$ADDR" describe mlxgrpc.v1.GenerateRequest | has "Sampling"
G -d '{"text": "1 2 3 1 2 3 1 2", "speculation": {"mode": "SPECULATION_MODE_NGRAM", "num_draft_tokens": 4},
        "stopping": {"max_tokens": 5, "ignore_eos": true}}' "$ADDR" $S/Generate | has FINISH_REASON_LENGTH
G "$ADDR" describe mlxgrpc.v1.SpeculationOptions | has num_draft_tokens
# The README's predicted output; a prediction with speculation off is refused by name
G "$ADDR" describe mlxgrpc.v1.GenerateRequest | has "Prediction prediction"
G -d '{"chat": {"messages": [{"role": "user", "content": "Replace cat with dog and repeat: the cat sat on the mat by the door."}]},
  "prediction": {"text": "the cat sat on the mat by the door."},
  "stopping": {"max_tokens": 32}}' "$ADDR" $S/Generate | has '"finished"'
if G -d '{"text": "x", "prediction": {"text": "y"}, "speculation": {"mode": "SPECULATION_MODE_OFF"}}' \
    "$ADDR" $S/Generate >"$OUT/prediction.txt" 2>&1; then
  echo "a prediction with speculation off was accepted"; exit 1
fi
has InvalidArgument <"$OUT/prediction.txt"
G "$ADDR" grpc.health.v1.Health/Check | has SERVING
G -d '{}' "$ADDR" $S/GetModelInfo | has '"vocab_size": [1-9]'
G -d '{"context_tokens": 8192}' "$ADDR" $S/PlanMemory | has '"max_safe_context"'
G -d '{"text": "Hello, world"}' "$ADDR" $S/Tokenize | has '"token_ids"'
G -d '{"inputs": ["A man is eating food.", "A man is eating bread."]}' "$ADDR" $S/Embed | grep -c '"embedding"' | has -x 2
# packed (the README's example): one message with both vectors as int8 and their scales
G -d '{"inputs": ["A man is eating food.", "A man is eating bread."],
  "packed": true, "embedding_type": "EMBEDDING_TYPE_INT8"}' "$ADDR" $S/Embed >"$OUT/packed.json"
has '"scales"' <"$OUT/packed.json" && grep -c '"packed"' "$OUT/packed.json" | has -x 1
# truncate off: an input over the model's limit is refused, naming it
if G -d "{\"inputs\": [\"short\", \"$(printf 'word %.0s' $(seq 600))\"], \"truncate\": \"TRUNCATION_NONE\"}" \
    "$ADDR" $S/Embed >"$OUT/truncate.txt" 2>&1; then
  echo "an over-long input with truncation off was embedded"; exit 1
fi
has 'inputs\[1\]' <"$OUT/truncate.txt"

G -d '{"chat": {"messages": [{"role": "user", "content": "What is the capital of France?"}]},
  "stopping": {"max_tokens": 32}}' "$ADDR" $S/Generate | has '"finished"'
stream=$(G -d '{"text": "Hello", "stopping": {"max_tokens": 5, "ignore_eos": true}}' "$ADDR" $S/Generate)
grep -q FINISH_REASON_LENGTH <<<"$stream"

# The README's sampling examples: n = 2 (two finished events, the second's choice_index 1),
# prompt_logprobs (one event, before the first delta) and the newer samplers
G -d '{"text": "Once upon a time", "n": 2, "sampling": {"temperature": 0.9, "seed": 7},
  "stopping": {"max_tokens": 24}}' "$ADDR" $S/Generate >"$OUT/n.json"
grep -c '"finished"' "$OUT/n.json" | has -x 2
has '"choice_index": 1' <"$OUT/n.json"
G -d '{"text": "The capital of France is Paris.", "prompt_logprobs": 2, "stopping": {"max_tokens": 1}}' \
  "$ADDR" $S/Generate >"$OUT/prompt_logprobs.json"
grep -c '"prompt_logprobs"' "$OUT/prompt_logprobs.json" | has -x 1
grep -m1 '"prompt_logprobs"\|"delta"' "$OUT/prompt_logprobs.json" | has prompt_logprobs
G -d '{"text": "Write a short poem about the sea.",
  "sampling": {"temperature": 0.8, "seed": 7, "min_p": 0.05, "typical_p": 0.95, "top_n_sigma": 2,
    "xtc": {"probability": 0.5, "threshold": 0.1}, "dry": {"multiplier": 0.8, "base": 1.75, "allowed_length": 2},
    "dynamic_temperature": {"range": 0.3, "exponent": 1}, "sampler_order": "SAMPLER_ORDER_LLAMA_CPP",
    "bad_words": ["storm"]}, "stopping": {"max_tokens": 48}}' "$ADDR" $S/Generate | has '"finished"'
G -d '{"text": "x", "sampling": {"mirostat": {"tau": 5}}, "stopping": {"max_tokens": 4}}' "$ADDR" $S/Generate | has '"finished"'

# The README's Cancel example: "terminal 1" runs a long story, "terminal 2" cancels it (3000
# tokens, not the README's 500: a fixture model could finish 500 before the first Cancel).
G -d '{"text": "Once upon a time", "stopping": {"max_tokens": 3000, "ignore_eos": true},
  "request_id": "story-1"}' "$ADDR" $S/Generate >"$OUT/story.json" &
story=$!
for _ in $(seq 100); do
  G -emit-defaults -d '{"request_id": "story-1"}' "$ADDR" $S/Cancel >"$OUT/cancel.json"
  grep -q '"cancelled": true' "$OUT/cancel.json" && break
  sleep 0.1
done
grep -q '"cancelled": true' "$OUT/cancel.json"
wait $story
grep -q FINISH_REASON_CANCELLED "$OUT/story.json"
G -emit-defaults -d '{"request_id": "story-1"}' "$ADDR" $S/Cancel | has '"cancelled": false'

# Structured output (the README's examples): every generation model accepts formats, and a
# complete output ends STOP
G -d '{}' "$ADDR" $S/GetModelInfo | has RESPONSE_FORMAT_KIND_JSON_SCHEMA
G -d '{"chat": {"messages": [{"role": "user", "content": "Maria Lopez is 34 and lives in Madrid. Extract the person."}]},
  "response_format": {"json_schema": "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"name\", \"age\", \"city\"], \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 40}, \"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 130}, \"city\": {\"type\": \"string\", \"maxLength\": 40}}}"},
  "stopping": {"max_tokens": 64}}' "$ADDR" $S/Generate | has '"finished"'
G -d '{"chat": {"messages": [{"role": "user", "content": "In which year did the French Revolution begin? Answer with the year only."}]},
  "response_format": {"regex": "[0-9]{4}"}}' "$ADDR" $S/Generate | has FINISH_REASON_STOP
G -d '{"chat": {"messages": [{"role": "user", "content": "Review: I loved it, best purchase ever! Is the review positive or negative?"}]},
  "response_format": {"choice": {"options": ["positive", "negative"]}}}' "$ADDR" $S/Generate | has FINISH_REASON_STOP
G -d '{"text": "Answer:", "stopping": {"max_tokens": 16},
  "response_format": {"json_schema": "{\"enum\": [\"yes\", \"no\"]}"}}' "$ADDR" $S/Generate \
  | has FINISH_REASON_STOP  # complete: "yes" or "no", quoted

G -d '{}' "$ADDR" $S/GetLoad | has '"max_running_requests": [1-9]'
# SMG's worker contract, served beside ours on the same port
G "$ADDR" list | has -x mlx.grpc.engine.MlxEngine
G "$ADDR" mlx.grpc.engine.MlxEngine/HealthCheck | has '"healthy": true'
G -d '{"text": "Hello", "sampling_params": {"temperature": 0, "max_tokens": 3, "ignore_eos": true}}' "$ADDR" \
  mlx.grpc.engine.MlxEngine/Generate | has '"finish_reason": "length"'

if G -d '{"text": "x", "sampling": {"temperature": -1}}' "$ADDR" $S/Generate 2>"$OUT/err.txt"; then
  exit 1
fi
grep -q InvalidArgument "$OUT/err.txt" && grep -q sampling.temperature "$OUT/err.txt"
if G -d '{"text": "x", "response_format": {"regex": "[a-"}}' "$ADDR" $S/Generate 2>"$OUT/err.txt"; then
  exit 1
fi
grep -q InvalidArgument "$OUT/err.txt" && grep -q response_format.regex "$OUT/err.txt"

# Adapters: the default generation model's first loaded adapter is used, then loaded again
# from its directory under another name and unloaded; unknown names are NOT_FOUND.
G "$ADDR" describe $S | has "rpc LoadAdapter"
G -d '{}' "$ADDR" $S/ListAdapters >"$OUT/adapters.json"
grep -q '"max_adapters": [1-9]' "$OUT/adapters.json"
adapter=$(sed -n '/^ *"name": /{s/^ *"name": "\(.*\)",*$/\1/p;q}' "$OUT/adapters.json")
source=$(sed -n '/^ *"source": /{s/^ *"source": "\(.*\)",*$/\1/p;q}' "$OUT/adapters.json")
[ -n "$adapter" ] && [ -n "$source" ]  # the CI servers start with one
G -d "{\"text\": \"Hello\", \"adapter\": \"$adapter\", \"stopping\": {\"max_tokens\": 5, \"ignore_eos\": true}}" \
  "$ADDR" $S/Generate | has FINISH_REASON_LENGTH
G -d "{\"name\": \"by-grpcurl\", \"path\": \"$source\"}" "$ADDR" $S/LoadAdapter | has '"name": "by-grpcurl"'
G -d '{}' "$ADDR" $S/ListAdapters | has '"name": "by-grpcurl"'
G -d '{"name": "by-grpcurl"}' "$ADDR" $S/UnloadAdapter | has by-grpcurl
if G -d '{"text": "x", "adapter": "no-such-adapter"}' "$ADDR" $S/Generate 2>"$OUT/err.txt"; then
  exit 1
fi
grep -q NotFound "$OUT/err.txt" && grep -q "no-such-adapter. is not loaded" "$OUT/err.txt"

# Models at run time (the README's examples), on a server with a model root holding the
# fixture's "llama" directory: load it under another name (progress to SERVING), list its
# state, generate, unload; a source leaving the root is INVALID_ARGUMENT.
G "$ADDR" describe $S | has "rpc LoadModel"
if G -d '{}' "$ADDR" $S/ListModels | has '"name": "llama"'; then
  G -d '{"name": "by-grpcurl", "source": "llama", "keep_alive_seconds": 600}' "$ADDR" $S/LoadModel >"$OUT/load.json"
  grep -q LOAD_STAGE_READING "$OUT/load.json" && grep -q LOAD_STAGE_SERVING "$OUT/load.json"
  G -d '{}' "$ADDR" $S/ListModels | has MODEL_STATE_READY
  G -d '{"model": "by-grpcurl", "text": "Hello", "stopping": {"max_tokens": 3, "ignore_eos": true}}' \
    "$ADDR" $S/Generate | has FINISH_REASON_LENGTH
  G -d '{"name": "by-grpcurl"}' "$ADDR" $S/UnloadModel | has MODEL_STATE_UNLOADED
  if G -d '{"name": "escape", "source": "../llama"}' "$ADDR" $S/LoadModel 2>"$OUT/err.txt"; then
    exit 1
  fi
  grep -q InvalidArgument "$OUT/err.txt"
fi

# Tools and reasoning (the README's examples), on a server with a model named "tools" (the
# fixture server's: random weights, so its calls come from tool choice REQUIRED, the grammar)
if G -d '{}' "$ADDR" $S/ListModels | has '"name": "tools"'; then
  G -d '{"model": "tools"}' "$ADDR" $S/GetModelInfo | has '"tool_calling": true'
  G -d '{"model": "tools", "chat": {"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    "tools": [{"name": "get_weather", "description": "The current weather in a city.",
      "parameters_json_schema": "{\"type\": \"object\", \"required\": [\"city\"], \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 16}}}"}],
    "tool_choice": {"mode": "TOOL_CHOICE_MODE_REQUIRED"}, "parallel_tool_calls": false, "enable_thinking": false},
    "stopping": {"max_tokens": 96}}' "$ADDR" $S/Generate >"$OUT/tools.json"
  grep -q FINISH_REASON_TOOL_CALLS "$OUT/tools.json"
  grep -q '"tool_calls": \[' "$OUT/tools.json"
  grep -q '"name": "get_weather"' "$OUT/tools.json"
  G -d '{"model": "tools", "chat": {"messages": [
      {"role": "user", "content": "What is the weather in Paris?"},
      {"role": "assistant", "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments_json": "{\"city\": \"Paris\"}"}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature_c\": 21, \"conditions\": \"sunny\"}"}],
    "tools": [{"name": "get_weather", "description": "The current weather in a city.",
      "parameters_json_schema": "{\"type\": \"object\", \"required\": [\"city\"], \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 16}}}"}],
    "tool_choice": {"mode": "TOOL_CHOICE_MODE_NONE"}, "enable_thinking": false},
    "stopping": {"max_tokens": 32}}' "$ADDR" $S/Generate >"$OUT/answer.json"
  grep -q '"finished"' "$OUT/answer.json"
  if grep -q '"tool_calls"' "$OUT/answer.json"; then
    exit 1
  fi
  # Thinking on (the template's default): the deltas carry "reasoning", apart from "text"
  G -d '{"model": "tools", "chat": {"messages": [{"role": "user", "content": "Why is the sky blue?"}]},
    "stopping": {"max_tokens": 8}}' "$ADDR" $S/Generate | has '"reasoning"'
fi
# An image in a chat message (the README's example, base64 in JSON), on a server with a model
# named "vision" (the fixture's LLaVA); a mislabelled image is INVALID_ARGUMENT naming the part
if G -d '{}' "$ADDR" $S/ListModels | has '"name": "vision"'; then
  G -d '{"model": "vision"}' "$ADDR" $S/GetModelInfo | has MEDIA_INPUT_EMBEDDINGS
  IMAGE=$(base64 -w0 clients/testdata/gradient.png)
  G -d '{"model": "vision", "chat": {"messages": [{"role": "user", "parts": [
    {"image": {"data": "'"$IMAGE"'", "media_type": "image/png"}},
    {"text": "What is in the picture?"}]}]},
    "stopping": {"max_tokens": 8}}' "$ADDR" $S/Generate | has FINISH_REASON_LENGTH
  if G -d '{"model": "vision", "chat": {"messages": [{"role": "user", "parts": [
      {"image": {"data": "'"$IMAGE"'", "media_type": "image/jpeg"}}]}]}}' "$ADDR" $S/Generate 2>"$OUT/err.txt"; then
    exit 1
  fi
  grep -q InvalidArgument "$OUT/err.txt" && grep -q "parts\[0\].image" "$OUT/err.txt"
fi
# A video in a chat message (the README's example), on a server with a model named "video"
# (the fixture's Qwen2.5-VL); a mislabelled video is INVALID_ARGUMENT naming the part, and a
# video to "vision" (images only) FAILED_PRECONDITION
if G -d '{}' "$ADDR" $S/ListModels | has '"name": "video"'; then
  G -d '{"model": "video"}' "$ADDR" $S/GetModelInfo | has '"video": true'
  VIDEO=$(base64 -w0 clients/testdata/clip.mp4)
  G -d '{"model": "video", "chat": {"messages": [{"role": "user", "parts": [
    {"video": {"data": "'"$VIDEO"'", "media_type": "video/mp4"}},
    {"text": "What happens in the video?"}]}]},
    "stopping": {"max_tokens": 8}}' "$ADDR" $S/Generate | has FINISH_REASON_LENGTH
  if G -d '{"model": "video", "chat": {"messages": [{"role": "user", "parts": [
      {"video": {"data": "'"$VIDEO"'", "media_type": "video/webm"}}]}]}}' "$ADDR" $S/Generate 2>"$OUT/err.txt"; then
    exit 1
  fi
  grep -q InvalidArgument "$OUT/err.txt" && grep -q "parts\[0\].video.media_type" "$OUT/err.txt"
  if G -d '{"model": "vision", "chat": {"messages": [{"role": "user", "parts": [
      {"video": {"data": "'"$VIDEO"'", "media_type": "video/mp4"}}]}]}}' "$ADDR" $S/Generate 2>"$OUT/err.txt"; then
    exit 1
  fi
  grep -q FailedPrecondition "$OUT/err.txt"
fi
# Audio in a chat message (the README's example), on a server with a model named "omni" (the
# fixture's Qwen3-Omni); a mislabelled file is INVALID_ARGUMENT naming the part, and audio to
# "vision" (images only) FAILED_PRECONDITION
if G -d '{}' "$ADDR" $S/ListModels | has '"name": "omni"'; then
  G -d '{"model": "omni"}' "$ADDR" $S/GetModelInfo | has '"audio": true'
  HEARD=$(base64 -w0 clients/testdata/speech.wav)
  G -d '{"model": "omni", "chat": {"messages": [{"role": "user", "parts": [
    {"audio": {"data": "'"$HEARD"'", "media_type": "audio/wav"}},
    {"text": "What is said, and in what tone?"}]}]},
    "stopping": {"max_tokens": 8}}' "$ADDR" $S/Generate | has FINISH_REASON_LENGTH
  if G -d '{"model": "omni", "chat": {"messages": [{"role": "user", "parts": [
      {"audio": {"data": "'"$HEARD"'", "media_type": "audio/mpeg"}}]}]}}' "$ADDR" $S/Generate 2>"$OUT/err.txt"; then
    exit 1
  fi
  grep -q InvalidArgument "$OUT/err.txt" && grep -q "parts\[0\].audio.media_type" "$OUT/err.txt"
  if G -d '{"model": "vision", "chat": {"messages": [{"role": "user", "parts": [
      {"audio": {"data": "'"$HEARD"'", "media_type": "audio/wav"}}]}]}}' "$ADDR" $S/Generate 2>"$OUT/err.txt"; then
    exit 1
  fi
  grep -q FailedPrecondition "$OUT/err.txt"
fi
# Transcribe (the README's example), on a server with a speech model named "whisper"; a
# mislabelled file is INVALID_ARGUMENT naming audio.media_type
if G -d '{}' "$ADDR" $S/ListModels | has '"name": "whisper"'; then
  G -d '{"model": "whisper"}' "$ADDR" $S/GetModelInfo | has '"transcription": true'
  AUDIO=$(base64 -w0 clients/testdata/speech.wav)
  G -d '{"model": "whisper", "audio": {"data": "'"$AUDIO"'", "media_type": "audio/wav"}}' \
    "$ADDR" $S/Transcribe | has '"finished"'
  if G -d '{"model": "whisper", "audio": {"data": "'"$AUDIO"'", "media_type": "audio/mpeg"}}' \
      "$ADDR" $S/Transcribe 2>"$OUT/err.txt"; then
    exit 1
  fi
  grep -q InvalidArgument "$OUT/err.txt" && grep -q "audio.media_type" "$OUT/err.txt"
fi
# Rerank (the README's example), on a server with a model named "reranker"
if G -d '{}' "$ADDR" $S/ListModels | has '"name": "reranker"'; then
  G -d '{"model": "reranker"}' "$ADDR" $S/GetModelInfo | has '"rerank": true'
  G -d '{"model": "reranker", "query": "Where do rivers flow?", "documents": ["Rivers flow into lakes and oceans.",
    "def add(a, b): return a + b", "Mountains rise above the valleys."], "top_n": 2}' "$ADDR" $S/Rerank \
    | grep -c '"score"' | has -x 2
fi
# Classify (the README's example), on a server with a model named "classifier": two inputs, top_k 2
if G -d '{}' "$ADDR" $S/ListModels | has '"name": "classifier"'; then
  G -d '{"model": "classifier"}' "$ADDR" $S/GetModelInfo | has '"classify": true'
  G -d '{"model": "classifier", "top_k": 2,
    "inputs": ["I loved this film.", "The service was slow and the food cold."]}' "$ADDR" $S/Classify \
    | grep -c '"score"' | has -x 4
  if G -d '{"model": "classifier", "inputs": ["x"], "top_k": -1}' "$ADDR" $S/Classify 2>"$OUT/classify.txt"; then
    echo "a negative top_k was accepted"; exit 1
  fi
  has InvalidArgument <"$OUT/classify.txt"
fi
# EmbedSparse (the README's example), on a server with a model named "splade": two inputs, top_k 16
if G -d '{}' "$ADDR" $S/ListModels | has '"name": "splade"'; then
  G -d '{"model": "splade"}' "$ADDR" $S/GetModelInfo | has '"sparse_embeddings": true'
  G -d '{"model": "splade", "top_k": 16,
    "inputs": ["Where do rivers flow?", "Rivers flow into lakes and oceans."]}' "$ADDR" $S/EmbedSparse \
    | grep -c '"token_ids"' | has -x 2
  if G -d '{"model": "splade", "inputs": ["x"], "top_k": -1}' "$ADDR" $S/EmbedSparse 2>"$OUT/sparse.txt"; then
    echo "a negative top_k was accepted"; exit 1
  fi
  has InvalidArgument <"$OUT/sparse.txt"
fi
set +x
echo "grpcurl checks passed against $ADDR"
