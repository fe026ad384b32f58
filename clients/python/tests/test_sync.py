"""The blocking client against a live server; the models come from ListModels."""

from __future__ import annotations

import json
import math
import time
import uuid

import grpc
import pytest

from mlxgrpc_client import Embeddings, connect, error_details, hamming, pb, unpack_bits

from _support import LONG, SESSION_PROMPT, SEVENTY, SIMILAR, UNRELATED, cosine, exact, over_long, release, saturate


def test_model_info(client, generator, embedder):
    info = client.model_info()
    assert info.name == generator.name  # the default generation model
    assert info.kind == pb.MODEL_KIND_GENERATION and info.capabilities.generation is True
    assert info.vocab_size > 0 and info.context_length > 0
    assert client.model_info(embedder.name).capabilities.embeddings is True
    assert embedder.embedding_dimensions > 0


def test_list_models(client, models, generator):
    assert models[0].name == generator.name  # the default generation model first
    assert len({m.name for m in client.list_models()}) == len(models)


def test_the_server_checks_the_token(address, token, client, generator):
    if token is None:
        pytest.skip("MLXGRPC_TOKEN is not set: the server may have no tokens")
    assert client.model_info().name == generator.name  # the fixture's client carries the token
    for other in (None, token + "-not"):
        with connect(address, token=other, timeout=30) as stranger:
            with pytest.raises(grpc.RpcError) as err:
                stranger.model_info()
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, other


def test_get_load_reports_the_generation_models(client, models, generator, tenant):
    before = client.get_load()
    assert [m.model for m in before.models] == [m.name for m in models if m.kind == pb.MODEL_KIND_GENERATION]
    assert before.uptime_seconds > 0
    load = before.models[0]  # the default generation model first
    assert load.model == generator.name
    assert load.max_running_requests > 0 and load.memory_budget_bytes > 0
    client.generate("Counting for the load report", **exact(5)).collect()
    after = client.get_load(generator.name).models[0]
    assert after.generated_tokens - load.generated_tokens >= 5
    assert after.generated_tokens_per_second > 0
    # This caller counts under its token's tenant (without tokens: the empty name), and sees it.
    (mine,) = [t for t in after.tenants if t.tenant == tenant]
    assert mine.generated_tokens >= 5 and mine.running_requests >= 0
    with pytest.raises(grpc.RpcError) as err:
        client.get_load("no-such-model")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    for embedder in (m for m in models if m.kind == pb.MODEL_KIND_EMBEDDING):
        with pytest.raises(grpc.RpcError) as err:
            client.get_load(embedder.name)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_greedy_generate_is_deterministic(client, generator):
    runs = []
    for _ in range(2):
        stream = client.generate("The quick brown fox", **exact(8))
        events = list(stream)
        assert events[0].WhichOneof("event") == "started"
        assert events[0].started.prompt_tokens > 0
        assert events[0].started.model == generator.name
        assert events[0].started.request_id == stream.request_id
        assert events[-1].WhichOneof("event") == "finished"
        assert all(e.WhichOneof("event") == "delta" for e in events[1:-1])
        finished = events[-1].finished
        assert finished.reason == pb.FINISH_REASON_LENGTH
        assert finished.usage.completion_tokens == 8
        assert finished.usage.prompt_tokens == events[0].started.prompt_tokens
        ids = [t for e in events[1:-1] for t in e.delta.token_ids]
        assert len(ids) == 8 and all(0 <= t < generator.vocab_size for t in ids)
        assert stream.result.token_ids == ids
        assert stream.result.finish_reason == pb.FINISH_REASON_LENGTH
        runs.append(ids)
    assert runs[0] == runs[1]


def test_collect_is_the_unary_form(client):
    result = client.generate("The quick brown fox", **exact(6)).collect()
    assert len(result.token_ids) == 6 and result.finish_reason == pb.FINISH_REASON_LENGTH
    assert result.text == client.detokenize(result.token_ids)
    assert result.finished.usage.completion_tokens == 6


def test_token_prompt_matches_text_prompt(client):
    text = "The quick brown fox"
    ids = list(client.tokenize(text, add_special_tokens=True).token_ids)
    by_text = client.generate(text, **exact(8)).collect()
    by_ids = client.generate(ids, **exact(8)).collect()
    assert by_ids.prompt_tokens == by_text.prompt_tokens == len(ids)
    assert by_ids.token_ids == by_text.token_ids


def test_chat_prompt(client, generator):
    if not generator.has_chat_template:
        pytest.skip(f"{generator.name} has no chat template")
    result = client.generate([{"role": "user", "content": "Hello"}], **exact(4)).collect()
    plain = client.tokenize("Hello", add_special_tokens=True)
    assert result.prompt_tokens > len(plain.token_ids)  # the chat template wraps the message
    assert len(result.token_ids) == 4


def test_seeded_sampling_is_reproducible(client):
    def run(seed):
        return client.generate("Once upon a time", sampling={"temperature": 1.0, "seed": seed},
                               **exact(12)).collect().token_ids
    assert run(7) == run(7)
    assert run(7) != run(8)


def test_n_seeded_choices(client):
    sampling = {"temperature": 1.0, "seed": 7}
    stream = client.generate("Once upon a time", n=2, sampling=sampling, **exact(6))
    events = list(stream)
    assert events[0].WhichOneof("event") == "started" and events[-1].WhichOneof("event") == "finished"
    for index in (0, 1):
        mine = [e for e in events[1:] if e.choice_index == index]
        assert [e.WhichOneof("event") for e in mine] == ["delta"] * (len(mine) - 1) + ["finished"]
        assert mine[-1].finished.reason == pb.FINISH_REASON_LENGTH
        assert mine[-1].finished.usage.completion_tokens == 6
    assert sorted(e.choice_index for e in events if e.WhichOneof("event") == "finished") == [0, 1]
    result = stream.result
    assert [c.index for c in result.choices] == [0, 1] and all(len(c.token_ids) == 6 for c in result.choices)
    assert result.token_ids == result.choices[0].token_ids and result.text == result.choices[0].text
    # Choice i of a request seeded s is the request seeded s + i alone.
    for index, choice in enumerate(result.choices):
        alone = client.generate("Once upon a time", sampling={**sampling, "seed": 7 + index}, **exact(6)).collect()
        assert choice.token_ids == alone.token_ids and choice.text == alone.text


def test_prompt_logprobs(client):
    text = "The quick brown fox jumps over"
    stream = client.generate(text, prompt_logprobs=2, **exact(3))
    events = list(stream)
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "started" and kinds.count("prompt_logprobs") == 1
    assert kinds.index("prompt_logprobs") < kinds.index("delta")
    tokens = events[kinds.index("prompt_logprobs")].prompt_logprobs.tokens
    ids = list(client.tokenize(text, add_special_tokens=True).token_ids)
    assert events[0].started.prompt_tokens == len(ids) and len(tokens) == len(ids) - 1
    assert [t.token_id for t in tokens] == ids[1:]  # every prompt token but the first
    for t in tokens:
        assert t.logprob <= 0 and len(t.top_logprobs) == 2
        assert t.top_logprobs[0].logprob >= max(t.top_logprobs[1].logprob, t.logprob - 1e-4)
    assert stream.result.prompt_logprobs == list(tokens) and len(stream.result.token_ids) == 3


def test_stop_token_id(client):
    greedy = client.generate("The quick brown fox", **exact(8)).collect().token_ids
    stop = greedy[3]
    first = greedy.index(stop)
    result = client.generate("The quick brown fox", max_tokens=8,
                             stopping={"stop_token_ids": [stop], "ignore_eos": True}).collect()
    assert result.finish_reason == pb.FINISH_REASON_STOP
    assert result.finished.stop_token_id == stop
    assert result.token_ids == greedy[:first]  # the stop token itself is not emitted


def test_logprobs(client):
    result = client.generate("The quick brown fox", top_logprobs=3, **exact(4)).collect()
    assert [lp.token_id for lp in result.logprobs] == result.token_ids
    for lp in result.logprobs:
        assert lp.logprob <= 0 and len(lp.top_logprobs) == 3
        assert lp.top_logprobs[0].token_id == lp.token_id  # greedy: the chosen token is the most likely


def test_json_schema_and_choice(client):
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "score": {"type": "integer",
              "minimum": 0, "maximum": 9}}, "required": ["answer", "score"], "additionalProperties": False}
    result = client.generate("Answer:", max_tokens=32, json_schema=schema).collect()
    assert result.finish_reason == pb.FINISH_REASON_STOP  # complete: the schema allows nothing more
    answer = json.loads(result.text)
    assert answer["answer"] in ("yes", "no") and 0 <= answer["score"] <= 9
    choice = client.generate("Pick:", max_tokens=8, response_format={"choice": {"options": ["red", "blue"]}})
    assert choice.collect().text in ("red", "blue")
    assert pb.RESPONSE_FORMAT_KIND_JSON_SCHEMA in client.model_info().capabilities.response_formats
    with pytest.raises(grpc.RpcError) as info:
        client.generate("Hi", json_schema="{not json", max_tokens=4).collect()
    assert [v.field for v in error_details(info.value).field_violations] == ["response_format.json_schema"]


#: Copy-heavy: the continuation repeats text the prompt holds, which prompt lookup drafts.
PASSAGE = ("The lighthouse keeper climbed the narrow stairs every evening at dusk, lit the great lamp, "
           "and wrote the names of the ships that passed in a worn leather book.")
COPY = f"Repeat exactly: {PASSAGE}\n{PASSAGE}\n"


def test_speculation_never_changes_the_output_and_reports_drafts(client, generator):
    off = client.generate(COPY, speculation="off", **exact(32)).collect()
    assert len(off.token_ids) == 32
    assert (off.finished.usage.draft_tokens, off.finished.usage.accepted_draft_tokens) == (0, 0)
    if pb.SPECULATION_MODE_NGRAM not in generator.capabilities.speculation.modes:
        pytest.skip(f"{generator.name} does not speculate with NGRAM")
    ngram = client.generate(COPY, speculation="ngram", num_draft_tokens=6, **exact(32)).collect()
    assert (ngram.token_ids, ngram.text) == (off.token_ids, off.text)
    usage = ngram.finished.usage
    assert usage.draft_tokens >= usage.accepted_draft_tokens >= 0, usage
    assert usage.completion_tokens == 32


def test_prediction_never_changes_the_output_and_reports_its_tokens(client, generator):
    if not generator.capabilities.speculation.external_tokens:
        pytest.skip(f"{generator.name} does not verify predicted tokens")
    plain = client.generate(COPY, max_tokens=24).collect()
    assert plain.text, "no output to predict"
    predicted = client.generate(COPY, max_tokens=24, prediction=plain.text).collect()
    assert (predicted.token_ids, predicted.text) == (plain.token_ids, plain.text)
    usage = predicted.finished.usage
    assert usage.accepted_prediction_tokens > 0, usage
    assert usage.accepted_prediction_tokens + usage.rejected_prediction_tokens <= usage.draft_tokens, usage
    by_ids = client.generate(COPY, max_tokens=24, prediction=plain.token_ids).collect()
    assert by_ids.token_ids == plain.token_ids
    assert by_ids.finished.usage.accepted_prediction_tokens > 0, by_ids.finished.usage
    assert (plain.finished.usage.accepted_prediction_tokens, plain.finished.usage.rejected_prediction_tokens) == (0, 0)


def test_prediction_with_speculation_off_is_invalid(client, generator):
    if not generator.capabilities.speculation.external_tokens:
        pytest.skip(f"{generator.name} does not verify predicted tokens")
    with pytest.raises(grpc.RpcError) as info:
        client.generate(COPY, max_tokens=4, speculation="off", prediction=PASSAGE).collect()
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT, details.message
    assert [v.field for v in details.field_violations] == ["prediction"]


def test_priority_never_changes_the_output(client, embedder):
    plain = client.generate("The quick brown fox", **exact(8)).collect()
    for priority in (10, -10):
        result = client.generate("The quick brown fox", priority=priority, **exact(8)).collect()
        assert (result.token_ids, result.text) == (plain.token_ids, plain.text)
    (low,) = client.embed("A man is eating food.", model=embedder.name, priority=-50)
    (normal,) = client.embed("A man is eating food.", model=embedder.name)
    assert cosine(low.embedding, normal.embedding) > 0.999


def test_tokenize_detokenize_round_trip(client):
    text = "Hello world, this is a test."
    tokens = client.tokenize(text)
    assert len(tokens.token_ids) > 0
    assert len(tokens.tokens) == len(tokens.token_ids)
    assert client.detokenize(tokens.token_ids) == text


def test_embed(client, embedder):
    responses = client.embed([*SIMILAR, UNRELATED], model=embedder.name)
    assert [r.index for r in responses] == [0, 1, 2]
    for r in responses:
        assert len(r.embedding) == embedder.embedding_dimensions
        assert math.isclose(math.sqrt(sum(x * x for x in r.embedding)), 1.0, abs_tol=1e-3)
        assert r.tokens > 0
    food, bread, stocks = (r.embedding for r in responses)
    assert cosine(food, bread) > cosine(food, stocks) + 0.2


def test_embed_dimensions(client, embedder):
    (r,) = client.embed("A man is eating food.", model=embedder.name, dimensions=64)
    assert len(r.embedding) == 64
    assert math.isclose(math.sqrt(sum(x * x for x in r.embedding)), 1.0, abs_tol=1e-3)


def test_embed_truncate(client, embedder):
    long = over_long(embedder)
    cut = client.embed(["short", long], model=embedder.name)  # the default: cut to the limit
    assert [r.index for r in cut] == [0, 1] and 0 < cut[1].tokens <= embedder.context_length
    (end,) = client.embed(long, model=embedder.name, truncate="end")
    assert end.tokens == cut[1].tokens and cosine(end.embedding, cut[1].embedding) > 0.999
    with pytest.raises(grpc.RpcError) as info:
        client.embed(["short", long], model=embedder.name, truncate="none")
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT, details.message
    assert [v.field for v in details.field_violations] == ["inputs[1]"]
    assert client.embed("short", model=embedder.name, truncate="none")[0].tokens > 0  # within the limit


def test_embed_packed(client, embedder):
    plain = client.embed(SEVENTY, model=embedder.name)
    packed = client.embed(SEVENTY, model=embedder.name, packed=True)
    assert isinstance(packed, Embeddings) and len(packed) == 70 and 1 <= packed.messages <= 2
    assert (packed.type, packed.dimensions) == (pb.EMBEDDING_TYPE_FLOAT32, embedder.embedding_dimensions)
    assert [list(v) for v in packed] == [list(r.embedding) for r in plain]  # the same float32 values
    assert packed.tokens == [r.tokens for r in plain]

    int8 = client.embed(SEVENTY, model=embedder.name, packed=True, embedding_type="int8")
    assert int8.type == pb.EMBEDDING_TYPE_INT8 and len(int8.scales) == 70 and int8.messages <= 2
    assert all(v.typecode == "b" and len(v) == embedder.embedding_dimensions for v in int8)
    assert min(cosine(q, r.embedding) for q, r in zip(int8.floats(), plain)) >= 0.999

    half = client.embed(SEVENTY, model=embedder.name, packed=True, embedding_type="float16")
    assert half.type == pb.EMBEDDING_TYPE_FLOAT16
    assert all(math.isclose(x, y, abs_tol=1e-3) for h, r in zip(half, plain) for x, y in zip(h, r.embedding))


def test_embed_packed_ubinary(client, embedder):
    # 100 dimensions: 13 bytes a vector, the last one's four low bits unused
    plain = client.embed([*SIMILAR, UNRELATED], model=embedder.name, dimensions=100)
    bits = client.embed([*SIMILAR, UNRELATED], model=embedder.name, dimensions=100, packed=True,
                        embedding_type="ubinary")
    assert (bits.type, bits.dimensions, bits.messages) == (pb.EMBEDDING_TYPE_UBINARY, 100, 1)
    assert all(isinstance(v, bytes) and len(v) == 13 and v[-1] & 0x0F == 0 for v in bits)
    assert [unpack_bits(v, 100) for v in bits] == [[int(x > 0) for x in r.embedding] for r in plain]
    food, bread, stocks = bits
    assert hamming(food, bread) < hamming(food, stocks)


def test_embed_smaller_type_needs_packed(client, embedder):
    with pytest.raises(grpc.RpcError) as info:
        client.embed(SIMILAR, model=embedder.name, embedding_type="int8")
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT, details.message
    assert [v.field for v in details.field_violations] == ["embedding_type"]


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
    stream = client.generate("Count forever:", **LONG)
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
    stream = client.generate("Count forever:", request_id="py-client-own-id", **LONG)
    assert next(stream).started.request_id == "py-client-own-id"
    assert client.cancel("py-client-own-id") is True
    assert stream.collect().finish_reason == pb.FINISH_REASON_CANCELLED


def test_cancel_unknown_request(client):
    assert client.cancel("no-such-request") is False


def test_client_side_cancel(client):
    with client.generate("Count forever:", **LONG) as stream:
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


def test_prefetch_and_close_session(client):
    session = f"py-{uuid.uuid4().hex}"
    generated = client.generate(SESSION_PROMPT, session_id=session, **exact(4)).collect()
    assert len(generated.token_ids) == 4
    reply = client.prefetch(SESSION_PROMPT, session_id=session)  # the prefix the Generate stored
    assert isinstance(reply, pb.PrefetchResponse)
    assert reply.prompt_tokens == generated.prompt_tokens  # the prompt read as Generate reads it
    assert reply.tier == pb.CACHE_TIER_MEMORY
    assert 0 < reply.cached_tokens <= reply.prompt_tokens - 1
    assert client.close_session(session) >= 1
    assert client.close_session(session) == 0  # no longer open
    with pytest.raises(grpc.RpcError) as info:
        client.prefetch(pb.PrefetchRequest(session_id=session))  # no prompt
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_deadline(client):
    with pytest.raises(grpc.RpcError) as info:
        client.generate("Count forever:", timeout=0.3, **LONG).collect()
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_queue_full_is_retried_after_the_servers_delay(client, generator):
    """A full admission queue refuses with RESOURCE_EXHAUSTED and RetryInfo; the
    client waits the server's delay and tries again with the same request id."""
    running, refusal = saturate(client, generator.name)
    retries = []

    def on_retry(details, delay):
        retries.append((details.code, details.reason, delay))
        release(client, running, generator.name)  # room for the next attempt

    try:
        details = error_details(refusal)
        assert details.code == grpc.StatusCode.RESOURCE_EXHAUSTED and details.reason == "QUEUE_FULL"
        assert details.retry_delay and details.retry_delay > 0
        client.on_retry = on_retry
        started = time.monotonic()
        result = client.generate("Hello", **exact(3)).collect()
        assert retries == [(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUEUE_FULL", details.retry_delay)]
        assert time.monotonic() - started >= details.retry_delay  # it waited as asked
        assert result.finish_reason == pb.FINISH_REASON_LENGTH and len(result.token_ids) == 3
    finally:
        client.on_retry = None
        release(client, running, generator.name)
