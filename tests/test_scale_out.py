"""Two replicas behind SMG (``smg launch --policy cache_aware``), through its OpenAI
HTTP API, all on 127.0.0.1 with the llama fixture model.

The gateway finds the replicas' worker contract, fetches the tokenizer from one,
applies the chat template itself and sends token ids. Checked here: a streamed chat
completion equals our own Generate of the same chat; different prompts spread over
both replicas; prompts sharing a long prefix stay on one and reuse its prefix cache;
a client that disconnects frees its row on the worker; a replica killed mid-run
fails only its own streams and the survivor takes the rest. Every wait is bounded.
"""

from __future__ import annotations

import json
import platform
import threading
import time
from types import SimpleNamespace

import jsonschema
import numpy as np
import pytest

from smg_grpc_proto import vllm_engine_pb2_grpc as vllm_grpc
from smg_grpc_proto.generated import common_pb2

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from engine.loading.embedded import default_embedding_model
from tests.cluster import Gateway, GatewayError, Replica, smg_executable
from tests.conftest import HAS_MINILM

pytestmark = pytest.mark.timeout(240)
SMG_WHEELS = {("Linux", "x86_64"), ("Darwin", "arm64")}  # where the test extra installs smg
MODEL = "llama"
TOOLS_MODEL = "agent"  # the tools-qwen fixture
EMBEDDER = "minilm"
ADAPTER = "tone"  # a LoRA adapter of the llama fixture
WORKER = "vllm.grpc.engine.VllmEngine"  # the contract SMG picks when a server offers several
TOPICS = ("apples", "rivers", "mountains", "violins", "glaciers", "lanterns", "harbors", "comets", "orchards",
          "deserts", "bridges", "forests", "islands", "engines", "meadows", "castles", "oceans", "tunnels",
          "gardens", "storms")


@pytest.fixture(scope="module")
def cluster(fixture_models, chat_models, fixture_adapters, tmp_path_factory):
    """Two llama replicas, a tool-capable one (model "agent"), one serving llama with its "tone"
    adapter (model "llama:tone") and one whose worker model is the embedded MiniLM, all behind
    one gateway."""
    if smg_executable() is None:
        if (platform.system(), platform.machine()) in SMG_WHEELS:
            pytest.fail("smg is not installed; scripts/setup.sh installs it (the test extra pins it)")
        pytest.skip(f"smg publishes no wheel for {platform.system()} {platform.machine()}")
    logs = tmp_path_factory.mktemp("scale-out")
    replicas = [Replica(f"replica{i}", fixture_models[MODEL], logs) for i in range(2)]
    # served as "agent": SMG picks parsers by model name, and a name with "qwen" in it would
    # get the Qwen3 reasoning parser (the fixture's template thinks only when asked)
    agent = logs / TOOLS_MODEL
    agent.symlink_to(chat_models["qwen"], target_is_directory=True)
    tools = Replica("tools", agent, logs)
    tuned = Replica("tuned", fixture_models[MODEL], logs, "--adapter", f"{ADAPTER}={fixture_adapters[ADAPTER]}",
                    "--smg-worker-model", f"{MODEL}:{ADAPTER}")
    workers = [*replicas, tools, tuned]
    embedder = None
    if HAS_MINILM:
        embedder = Replica("embedder", fixture_models[MODEL], logs, "--embedding-model",
                           f"{EMBEDDER}={default_embedding_model()}", "--smg-worker-model", EMBEDDER)
        workers.append(embedder)
    gateway = None
    try:
        for r in workers:
            r.wait_until(r.serving, 120, "health SERVING")
        # probe every second so a dead replica leaves the rotation quickly
        gateway = Gateway(workers, logs, "cache_aware", "--health-check-interval-secs", "1")
        gateway.wait_until(gateway.ready, 60, "/readiness with every worker healthy")
        yield SimpleNamespace(replicas=replicas, tools=tools, tuned=tuned, embedder=embedder, gateway=gateway)
    finally:
        for process in ([gateway] if gateway else []) + workers:
            process.stop()


def chat(content: str, max_tokens: int) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0}


def generated(replicas) -> list[int]:
    return [r.load().generated_tokens for r in replicas]


def requests_total(replica: Replica, method: str) -> float:
    prefix = f'mlxgrpc_requests_total{{code="OK",method="{method}",service="{WORKER}"}}'
    lines = [line for line in replica.metrics().splitlines() if line.startswith(prefix)]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_the_gateway_registered_both_workers_and_fetched_the_tokenizer(cluster):
    assert all(requests_total(r, "GetModelInfo") >= 1 for r in cluster.replicas)
    assert sum(requests_total(r, "GetTokenizer") for r in cluster.replicas) >= 1
    status, body = cluster.gateway.request("GET", "/v1/models")
    assert status == 200 and f'"id":"{MODEL}"' in body


def test_a_streamed_chat_arrives_token_by_token_and_equals_a_direct_generate(cluster):
    body = {**chat("Name three colours of the sea.", 12), "stream_options": {"include_usage": True}}
    stream = cluster.gateway.stream_chat(body, timeout=30)
    events = list(stream)
    pieces = [e["choices"][0]["delta"]["content"] for e in events
              if e.get("choices") and e["choices"][0]["delta"].get("content")]
    usage = next(e["usage"] for e in events if e.get("usage"))

    direct = pb.GenerateRequest(chat=gen_pb.ChatMessages(messages=[
        gen_pb.ChatMessage(role="user", content="Name three colours of the sea.")]),
        stopping=gen_pb.StoppingCriteria(max_tokens=12))
    responses = list(cluster.replicas[1].stub.Generate(direct, timeout=30))
    text = "".join(r.delta.text for r in responses if r.HasField("delta"))
    finished = responses[-1].finished

    assert "".join(pieces) == text
    assert len(pieces) == usage["completion_tokens"] == finished.usage.completion_tokens == 12
    assert usage["prompt_tokens"] == finished.usage.prompt_tokens


def test_different_prompts_reach_both_replicas(cluster):
    before = generated(cluster.replicas)
    for topic in TOPICS:
        out = cluster.gateway.chat(chat(f"{topic}: write one line about {topic} and why they matter", 4))
        assert out["usage"]["completion_tokens"] == 4
    delta = [a - b for a, b in zip(generated(cluster.replicas), before)]
    assert sum(delta) == 4 * len(TOPICS)
    assert all(d > 0 for d in delta), delta


def test_a_shared_prefix_stays_on_one_replica_and_reuses_its_cache(cluster):
    document = "The lighthouse keeper counted the boats every evening and wrote their names in a ledger. " * 4
    before = generated(cluster.replicas)
    cached = []
    for i in range(10):
        out = cluster.gateway.chat(chat(f"{document} Question {i}: which boat came first?", 4))
        cached.append(out["usage"]["prompt_tokens_details"]["cached_tokens"] / out["usage"]["prompt_tokens"])
    delta = [a - b for a, b in zip(generated(cluster.replicas), before)]
    assert sorted(delta) == [0, 40], delta
    assert all(share > 0.8 for share in cached[1:]), cached


def test_routing_follows_kv_events_not_the_gateways_guess(cluster):
    """The gateway sends a document to one replica, which then drops it (FlushCache), while the
    other replica gets it straight over our API: the gateway's own tree still points at the
    first, only the replicas' KV events say where the document's blocks now are."""
    document = "The cartographer mapped every island of the archipelago and named each after a star. " * 5
    before = generated(cluster.replicas)
    cluster.gateway.chat(chat(f"{document} Question: which island came first?", 2))
    delta = [a - b for a, b in zip(generated(cluster.replicas), before)]
    first = cluster.replicas[delta.index(2)]
    holder = cluster.replicas[1 - delta.index(2)]
    assert vllm_grpc.VllmEngineStub(first.channel).FlushCache(common_pb2.FlushCacheRequest(), timeout=10).success
    direct(holder, pb.GenerateRequest(chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(
        role="user", content=f"{document} Question: which island came last?")]),
        stopping=gen_pb.StoppingCriteria(max_tokens=2)))
    time.sleep(1.0)  # the clear and the stored blocks reach the gateway over the KV event streams
    before = generated(cluster.replicas)
    out = cluster.gateway.chat(chat(f"{document} Question: which star is the brightest?", 4))
    after = {id(r): n for r, n in zip(cluster.replicas, generated(cluster.replicas))}
    was = {id(r): n for r, n in zip(cluster.replicas, before)}
    assert (after[id(first)] - was[id(first)], after[id(holder)] - was[id(holder)]) == (0, 4)
    assert out["usage"]["prompt_tokens_details"]["cached_tokens"] > 0.5 * out["usage"]["prompt_tokens"]


def test_a_client_disconnect_aborts_the_request_on_the_worker(cluster):
    before = generated(cluster.replicas)
    stream = cluster.gateway.stream_chat(chat("Tell a very long story about the sea.", 3000), timeout=30)
    received = 0
    for event in stream:
        received += bool(event["choices"] and event["choices"][0]["delta"].get("content"))
        if received == 3:
            break
    stream.close()
    deadline = time.monotonic() + 15
    while any(load.running_requests or load.kv_cache_bytes for load in map(Replica.load, cluster.replicas)):
        assert time.monotonic() < deadline, "the worker still holds the row"
        time.sleep(0.1)
    delta = sum(a - b for a, b in zip(generated(cluster.replicas), before))
    assert 3 <= delta < 3000, delta  # stopped early, not run to max_tokens


# --- what the full worker contract carries through the gateway -------------------------------


def direct(replica: Replica, request: pb.GenerateRequest) -> tuple[str, gen_pb.Finished]:
    responses = list(replica.stub.Generate(request, timeout=60))
    return "".join(r.delta.text for r in responses if r.HasField("delta")), responses[-1].finished


def test_a_json_schema_response_format_validates(cluster):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                               "population": {"type": "integer", "minimum": 0, "maximum": 99999}},
              "required": ["city", "population"], "additionalProperties": False}
    for i in range(3):
        body = {**chat(f"Describe city number {i} as JSON.", 200), "temperature": 1.0, "seed": i,
                "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}}
        out = cluster.gateway.chat(body)
        assert out["choices"][0]["finish_reason"] == "stop", out  # the object is complete, not cut
        jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), schema)


def test_a_stop_string_stops_as_on_our_own_api(cluster):
    prompt = "Count the boats in the harbour."
    text, _ = direct(cluster.replicas[0], pb.GenerateRequest(
        chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", content=prompt)]),
        stopping=gen_pb.StoppingCriteria(max_tokens=40)))
    stop = text[len(text) // 2:len(text) // 2 + 3]
    assert stop.strip(), text
    out = cluster.gateway.chat({**chat(prompt, 40), "stop": [stop]})
    choice = out["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == text[:text.index(stop)]


def test_n_choices_and_seeded_ones_reproduce(cluster):
    body = {**chat("Name a colour.", 8), "temperature": 1.0, "seed": 7, "n": 3}
    first = cluster.gateway.chat(body)
    assert sorted(c["index"] for c in first["choices"]) == [0, 1, 2]
    assert first["usage"]["completion_tokens"] == 24
    again = cluster.gateway.chat(body)
    contents = {c["index"]: c["message"]["content"] for c in first["choices"]}
    assert contents == {c["index"]: c["message"]["content"] for c in again["choices"]}
    assert len(set(contents.values())) > 1


def test_n_choices_carry_logprobs_equal_to_our_generates_choices(cluster):
    prompt = "Name a fruit."
    body = {**chat(prompt, 5), "temperature": 1.0, "seed": 21, "n": 2, "logprobs": True, "top_logprobs": 2}
    out = cluster.gateway.chat(body)
    theirs = {c["index"]: c["logprobs"]["content"] for c in out["choices"]}
    assert sorted(theirs) == [0, 1] and out["usage"]["completion_tokens"] == 10
    responses = list(cluster.replicas[0].stub.Generate(pb.GenerateRequest(
        chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", content=prompt)]), n=2,
        sampling=gen_pb.SamplingParams(temperature=1.0, seed=21), stopping=gen_pb.StoppingCriteria(max_tokens=5),
        logprobs=True, top_logprobs=2), timeout=60))
    ours: dict[int, list] = {0: [], 1: []}
    for r in responses:
        if r.HasField("delta"):
            ours[r.choice_index] += r.delta.logprobs
    for i in (0, 1):  # one engine request of n = 2 behind the gateway, seeded 21 and 22
        assert [c["logprob"] for c in theirs[i]] == pytest.approx([lp.logprob for lp in ours[i]], abs=1e-4)
        assert [t["logprob"] for c in theirs[i] for t in c["top_logprobs"]] == pytest.approx(
            [t.logprob for lp in ours[i] for t in lp.top_logprobs], abs=1e-4)


def test_chat_logprobs_match_our_generate(cluster):
    prompt = "The river"
    out = cluster.gateway.chat({**chat(prompt, 5), "logprobs": True, "top_logprobs": 2})
    content = out["choices"][0]["logprobs"]["content"]
    responses = list(cluster.replicas[0].stub.Generate(pb.GenerateRequest(
        chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", content=prompt)]),
        stopping=gen_pb.StoppingCriteria(max_tokens=5), logprobs=True, top_logprobs=2), timeout=60))
    ours = [lp for r in responses if r.HasField("delta") for lp in r.delta.logprobs]
    assert [c["logprob"] for c in content] == pytest.approx([lp.logprob for lp in ours], abs=1e-4)
    assert [t["logprob"] for c in content for t in c["top_logprobs"]] == pytest.approx(
        [t.logprob for lp in ours for t in lp.top_logprobs], abs=1e-4)


def test_a_completion_equals_our_generate_of_the_same_text(cluster):
    out = cluster.gateway.post("/v1/completions", {"model": MODEL, "prompt": "The river", "max_tokens": 6,
                                                   "temperature": 0})
    text, finished = direct(cluster.replicas[0], pb.GenerateRequest(
        text="The river", stopping=gen_pb.StoppingCriteria(max_tokens=6)))
    assert out["choices"][0]["text"] == text
    assert out["usage"]["prompt_tokens"] == finished.usage.prompt_tokens
    assert out["usage"]["completion_tokens"] == 6


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time in a time zone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}},
                       "required": ["zone"], "additionalProperties": False}}}]


@pytest.mark.parametrize("tool_choice, names", [
    ("required", {"get_weather", "get_time"}),
    ({"type": "function", "function": {"name": "get_time"}}, {"get_time"}),
])
def test_tool_choice_answers_with_parsed_calls(cluster, tool_choice, names):
    for seed in range(3):
        body = {"model": TOOLS_MODEL, "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
                "tools": TOOLS, "tool_choice": tool_choice, "max_tokens": 120, "temperature": 1.0, "seed": seed}
        message = cluster.gateway.chat(body)["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        assert calls, message
        for call in calls:
            assert call["function"]["name"] in names
            arguments = json.loads(call["function"]["arguments"])
            parameters = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] ==
                              call["function"]["name"])
            jsonschema.validate(arguments, parameters)


def test_an_adapter_is_reached_as_its_own_model(cluster):
    prompt = "Tell me about the harbour."
    out = cluster.gateway.chat({**chat(prompt, 12), "model": f"{MODEL}:{ADAPTER}"})
    messages = gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", content=prompt)])
    tuned, _ = direct(cluster.tuned, pb.GenerateRequest(chat=messages, adapter=ADAPTER,
                                                        stopping=gen_pb.StoppingCriteria(max_tokens=12)))
    base, _ = direct(cluster.tuned, pb.GenerateRequest(chat=messages, stopping=gen_pb.StoppingCriteria(max_tokens=12)))
    assert out["choices"][0]["message"]["content"] == tuned != base
    status, models = cluster.gateway.request("GET", "/v1/models")
    assert f'"id":"{MODEL}:{ADAPTER}"' in models


@pytest.mark.skipif(not HAS_MINILM, reason="the embedded MiniLM is not installed")
def test_embeddings_equal_our_embed(cluster):
    texts = ["The lighthouse keeper counted the boats.", "A short one."]
    ours = [list(r.embedding) for r in sorted(cluster.embedder.stub.Embed(
        pb.EmbedRequest(model=EMBEDDER, inputs=texts), timeout=60), key=lambda r: r.index)]
    for text, vector in zip(texts, ours):  # SMG 1.13 embeds the first input of a list only: one at a time
        out = cluster.gateway.post("/v1/embeddings", {"model": EMBEDDER, "input": text})
        got = out["data"][0]["embedding"]
        assert np.dot(got, vector) / (np.linalg.norm(got) * np.linalg.norm(vector)) > 0.99999


@pytest.fixture
def pair(fixture_models, tmp_path):
    """Two more llama replicas behind a round-robin gateway: streams spread whatever the prompts.
    Gateway retries are off, so a replica's death reaches its streams' clients."""
    replicas = [Replica(f"pair{i}", fixture_models[MODEL], tmp_path) for i in range(2)]
    gateway = None
    try:
        for r in replicas:
            r.wait_until(r.serving, 120, "health SERVING")
        gateway = Gateway(replicas, tmp_path, "round_robin", "--health-check-interval-secs", "1",
                          "--disable-retries")
        gateway.wait_until(gateway.ready, 60, "/readiness with both workers healthy")
        yield SimpleNamespace(replicas=replicas, gateway=gateway)
    finally:
        for process in ([gateway] if gateway else []) + replicas:
            process.stop()


def test_a_killed_replica_fails_its_own_streams_and_the_survivor_serves_the_rest(pair):
    cluster = pair
    victim, survivor = cluster.replicas
    outcomes: dict[int, str] = {}
    streaming: set[int] = set()  # streams whose first event came: placed on a replica

    def stream(i: int) -> None:
        try:
            events = []
            for event in cluster.gateway.stream_chat(chat(f"A long story about {TOPICS[i]}.", 3000), timeout=60):
                streaming.add(i)
                events.append(event)
            outcomes[i] = "ok" if any(e.get("choices") and e["choices"][0].get("finish_reason") == "length"
                                      for e in events) else "truncated"
        except (GatewayError, OSError) as exc:
            outcomes[i] = f"error: {exc}"

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30

    def placed(load) -> int:  # running or waiting there: a stream the replica's death ends
        return load.running_requests + load.waiting_requests

    # Every stream placed (none still on its way to a replica) and both replicas holding some:
    # on a fast machine the first streams may end before the last is placed.
    while True:
        on_victim, on_survivor = placed(victim.load()), placed(survivor.load())
        if on_victim and on_survivor and len(streaming) == len(threads):
            break
        assert time.monotonic() < deadline, "the streams did not spread over both replicas"
        time.sleep(0.05)
    # A replica's load figures may lag a stream that has just arrived there; each stream is on
    # one of the two, so those not counted on the survivor are the most the victim can hold.
    on_victim = max(on_victim, len(threads) - on_survivor)
    # Frozen at once, the victim's streams cannot run to their end before it dies, however
    # slow the machine is at reaching the kill.
    victim.freeze()
    victim.kill()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a stream hung"
    errors = [o for o in outcomes.values() if o.startswith("error")]
    assert len(outcomes) == 6 and 1 <= len(errors) <= on_victim, outcomes
    assert all(o == "ok" for o in outcomes.values() if not o.startswith("error")), outcomes

    # Retries are off: until its health checks see the victim gone, the gateway may still pick it.
    cluster.gateway.wait_until(lambda: cluster.gateway.healthy_workers() == 1, 30, "the victim marked unhealthy")
    before = survivor.load().generated_tokens
    for topic in TOPICS[:6]:
        assert cluster.gateway.chat(chat(f"After the failure: {topic}.", 4), timeout=30)["usage"]["completion_tokens"] == 4
    assert survivor.load().generated_tokens - before == 24
