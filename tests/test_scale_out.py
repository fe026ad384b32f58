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

import platform
import threading
import time
from types import SimpleNamespace

import pytest

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.cluster import Gateway, GatewayError, Replica, smg_executable

pytestmark = pytest.mark.timeout(240)
SMG_WHEELS = {("Linux", "x86_64"), ("Darwin", "arm64")}  # where the test extra installs smg
MODEL = "llama"
TOPICS = ("apples", "rivers", "mountains", "violins", "glaciers", "lanterns", "harbors", "comets", "orchards",
          "deserts", "bridges", "forests", "islands", "engines", "meadows", "castles", "oceans", "tunnels",
          "gardens", "storms")


@pytest.fixture(scope="module")
def cluster(fixture_models, tmp_path_factory):
    if smg_executable() is None:
        if (platform.system(), platform.machine()) in SMG_WHEELS:
            pytest.fail("smg is not installed; scripts/setup.sh installs it (the test extra pins it)")
        pytest.skip(f"smg publishes no wheel for {platform.system()} {platform.machine()}")
    logs = tmp_path_factory.mktemp("scale-out")
    replicas = [Replica(f"replica{i}", fixture_models[MODEL], logs) for i in range(2)]
    gateway = None
    try:
        for r in replicas:
            r.wait_until(r.serving, 120, "health SERVING")
        # probe every second so a dead replica leaves the rotation quickly
        gateway = Gateway(replicas, logs, "cache_aware", "--health-check-interval-secs", "1")
        gateway.wait_until(gateway.ready, 60, "/readiness with both workers healthy")
        yield SimpleNamespace(replicas=replicas, gateway=gateway)
    finally:
        for process in ([gateway] if gateway else []) + replicas:
            process.stop()


def chat(content: str, max_tokens: int) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0}


def generated(replicas) -> list[int]:
    return [r.load().generated_tokens for r in replicas]


def requests_total(replica: Replica, method: str) -> float:
    prefix = f'mlxgrpc_requests_total{{code="OK",method="{method}",service="mlx.grpc.engine.MlxEngine"}}'
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


def test_a_killed_replica_fails_its_own_streams_and_the_survivor_serves_the_rest(cluster):
    victim, survivor = cluster.replicas
    outcomes: dict[int, str] = {}

    def stream(i: int) -> None:
        try:
            # long enough that the victim's streams are still running when it dies
            events = list(cluster.gateway.stream_chat(chat(f"A long story about {TOPICS[i]}.", 3000), timeout=60))
            outcomes[i] = "ok" if any(e.get("choices") and e["choices"][0].get("finish_reason") == "length"
                                      for e in events) else "truncated"
        except (GatewayError, OSError) as exc:
            outcomes[i] = f"error: {exc}"

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while not (victim.load().running_requests and survivor.load().running_requests):
        assert time.monotonic() < deadline, "the streams did not spread over both replicas"
        time.sleep(0.05)
    on_victim = victim.load().running_requests
    victim.kill()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a stream hung"
    errors = [o for o in outcomes.values() if o.startswith("error")]
    assert len(outcomes) == 6 and 1 <= len(errors) <= on_victim, outcomes
    assert all(o == "ok" for o in outcomes.values() if not o.startswith("error")), outcomes

    before = survivor.load().generated_tokens
    for topic in TOPICS[:6]:
        assert cluster.gateway.chat(chat(f"After the failure: {topic}.", 4), timeout=30)["usage"]["completion_tokens"] == 4
    assert survivor.load().generated_tokens - before == 24
