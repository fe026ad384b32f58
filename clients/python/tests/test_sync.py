"""The blocking client against a live server (the tiny "llama" fixture model and
"all-minilm-l6-v2")."""

from __future__ import annotations

import math
import time

import grpc
import pytest

from mlxgrpc_client import error_details, pb

from _support import SIMILAR, UNRELATED, cosine


def test_model_info(client):
    info = client.model_info()
    assert info.name == "llama"
    assert info.kind == pb.MODEL_KIND_GENERATION
    assert info.vocab_size == 640
    assert info.context_length == 4096
    assert info.capabilities.generation is True
    assert info.has_chat_template is True
    embedder = client.model_info("all-minilm-l6-v2")
    assert embedder.capabilities.embeddings is True
    assert embedder.embedding_dimensions == 384


def test_list_models(client):
    models = client.list_models()
    assert [m.name for m in models][0] == "llama"  # the default generation model first
    assert {m.name for m in models} == {"llama", "all-minilm-l6-v2"}


def test_get_load_reports_the_generation_model(client):
    before = client.get_load()
    assert [m.model for m in before.models] == ["llama"] and before.uptime_seconds > 0
    llama = before.models[0]
    assert llama.max_running_requests == 4 and llama.memory_budget_bytes > 0
    client.generate("Counting for the load report", max_tokens=5).collect()
    after = client.get_load("llama").models[0]
    assert after.generated_tokens - llama.generated_tokens >= 5
    assert after.generated_tokens_per_second > 0
    with pytest.raises(grpc.RpcError) as err:
        client.get_load("all-minilm-l6-v2")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_greedy_generate_is_deterministic(client):
    runs = []
    for _ in range(2):
        stream = client.generate("The quick brown fox", max_tokens=8)
        events = list(stream)
        assert events[0].WhichOneof("event") == "started"
        assert events[0].started.prompt_tokens > 0
        assert events[0].started.model == "llama"
        assert events[0].started.request_id == stream.request_id
        assert events[-1].WhichOneof("event") == "finished"
        assert all(e.WhichOneof("event") == "delta" for e in events[1:-1])
        finished = events[-1].finished
        assert finished.reason == pb.FINISH_REASON_LENGTH
        assert finished.usage.completion_tokens == 8
        assert finished.usage.prompt_tokens == events[0].started.prompt_tokens
        ids = [t for e in events[1:-1] for t in e.delta.token_ids]
        assert len(ids) == 8 and all(0 <= t < 640 for t in ids)
        assert stream.result.token_ids == ids
        assert stream.result.finish_reason == pb.FINISH_REASON_LENGTH
        runs.append(ids)
    assert runs[0] == runs[1]


def test_token_prompt_matches_text_prompt(client):
    text = "The quick brown fox"
    ids = list(client.tokenize(text, add_special_tokens=True).token_ids)
    by_text = client.generate(text, max_tokens=8).collect()
    by_ids = client.generate(ids, max_tokens=8).collect()
    assert by_ids.prompt_tokens == by_text.prompt_tokens == len(ids)
    assert by_ids.token_ids == by_text.token_ids


def test_chat_prompt(client):
    result = client.generate([{"role": "user", "content": "Hello"}], max_tokens=4).collect()
    plain = client.tokenize("Hello", add_special_tokens=True)
    assert result.prompt_tokens > len(plain.token_ids)  # the chat template wraps the message
    assert len(result.token_ids) == 4


def test_seeded_sampling_is_reproducible(client):
    def run(seed):
        return client.generate("Once upon a time", max_tokens=12,
                               sampling={"temperature": 1.0, "seed": seed}).collect().token_ids
    assert run(7) == run(7)
    assert run(7) != run(8)


def test_stop_token_id(client):
    greedy = client.generate("The quick brown fox", max_tokens=8).collect().token_ids
    stop = greedy[3]
    first = greedy.index(stop)
    result = client.generate("The quick brown fox", max_tokens=8, stopping={"stop_token_ids": [stop]}).collect()
    assert result.finish_reason == pb.FINISH_REASON_STOP
    assert result.finished.stop_token_id == stop
    assert result.token_ids == greedy[:first]  # the stop token itself is not emitted


def test_logprobs(client):
    result = client.generate("The quick brown fox", max_tokens=4, top_logprobs=3).collect()
    assert [lp.token_id for lp in result.logprobs] == result.token_ids
    for lp in result.logprobs:
        assert lp.logprob <= 0 and len(lp.top_logprobs) == 3
        assert lp.top_logprobs[0].token_id == lp.token_id  # greedy: the chosen token is the most likely


def test_tokenize_detokenize_round_trip(client):
    text = "Hello world, this is a test."
    tokens = client.tokenize(text)
    assert len(tokens.token_ids) > 0
    assert len(tokens.tokens) == len(tokens.token_ids)
    assert client.detokenize(tokens.token_ids) == text


def test_embed(client):
    inputs = [*SIMILAR, UNRELATED]
    responses = client.embed(inputs)
    assert [r.index for r in responses] == [0, 1, 2]
    for r in responses:
        assert len(r.embedding) == 384
        assert math.isclose(math.sqrt(sum(x * x for x in r.embedding)), 1.0, abs_tol=1e-3)
        assert r.tokens > 0
    food, bread, stocks = (r.embedding for r in responses)
    assert cosine(food, bread) > 0.7
    assert cosine(food, stocks) < 0.2


def test_embed_dimensions(client):
    (r,) = client.embed("A man is eating food.", dimensions=64)
    assert len(r.embedding) == 64
    assert math.isclose(math.sqrt(sum(x * x for x in r.embedding)), 1.0, abs_tol=1e-3)


def test_invalid_temperature(client):
    with pytest.raises(grpc.RpcError) as info:
        client.generate("Hi", sampling={"temperature": -1}, max_tokens=4).collect()
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.field_violations] == ["sampling.temperature"]
    assert details.error_info.domain == "mlxgrpc.v1"
    assert details.reason == "INVALID_FIELD"
    assert details.error_info.metadata["field"] == "sampling.temperature"
    assert details.retry_delay is None


def test_unknown_model(client):
    with pytest.raises(grpc.RpcError) as info:
        client.generate("Hi", model="no-such-model", max_tokens=4).collect()
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_details(info.value).error_info.domain == "mlxgrpc.v1"
    with pytest.raises(grpc.RpcError) as info:
        client.model_info("no-such-model")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_cancel_rpc(client):
    stream = client.generate("Count forever:", max_tokens=2000)
    deltas = 0
    cancelled = None
    for event in stream:
        if event.HasField("delta"):
            deltas += 1
            if deltas == 3:
                cancelled = client.cancel(stream.request_id)
    assert cancelled is True
    assert stream.result.finish_reason == pb.FINISH_REASON_CANCELLED
    assert 3 <= stream.result.finished.usage.completion_tokens < 2000
    assert stream.code() == grpc.StatusCode.OK
    assert client.cancel(stream.request_id) is False  # it is gone


def test_cancel_with_own_request_id(client):
    stream = client.generate("Count forever:", max_tokens=2000, request_id="py-client-own-id")
    assert next(stream).started.request_id == "py-client-own-id"
    assert client.cancel("py-client-own-id") is True
    assert stream.collect().finish_reason == pb.FINISH_REASON_CANCELLED


def test_cancel_unknown_request(client):
    assert client.cancel("no-such-request") is False


def test_client_side_cancel(client):
    with client.generate("Count forever:", max_tokens=2000) as stream:
        for i, _ in enumerate(stream, 1):
            if i == 3:
                assert stream.cancel() is True
    assert stream.code() == grpc.StatusCode.CANCELLED
    assert stream.result.finished is None
    assert len(stream.result.token_ids) < 2000
    # The server dropped the request when the call went away.
    deadline = time.monotonic() + 5
    while client.cancel(stream.request_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.cancel(stream.request_id) is False


def test_deadline(client):
    with pytest.raises(grpc.RpcError) as info:
        client.generate("Count forever:", max_tokens=2000, timeout=0.3).collect()
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
