"""The asyncio client against a live server."""

from __future__ import annotations

import asyncio
import math
import uuid

import grpc
import pytest

from mlxgrpc_client import error_details, pb

from _support import LONG, SESSION_PROMPT, SEVENTY, SIMILAR, UNRELATED, cosine, exact, over_long


async def test_model_info_and_list_models(aclient, models, generator):
    info = await aclient.model_info()
    assert (info.name, info.vocab_size, info.capabilities.generation) == (
        generator.name, generator.vocab_size, True)
    assert [m.name for m in await aclient.list_models()] == [m.name for m in models]


async def test_get_load(aclient, models, generator):
    reply = await aclient.get_load()
    assert [m.model for m in reply.models] == [m.name for m in models if m.kind == pb.MODEL_KIND_GENERATION]
    assert reply.models[0].model == generator.name  # the default first
    assert reply.models[0].max_running_requests > 0 and reply.models[0].waiting_requests >= 0


async def test_greedy_generate_matches_blocking_client(aclient, client):
    events = [e async for e in aclient.generate("The quick brown fox", **exact(8))]
    assert events[0].WhichOneof("event") == "started" and events[0].started.prompt_tokens > 0
    assert events[-1].WhichOneof("event") == "finished"
    assert events[-1].finished.reason == pb.FINISH_REASON_LENGTH
    ids = [t for e in events if e.HasField("delta") for t in e.delta.token_ids]
    assert len(ids) == 8
    assert ids == client.generate("The quick brown fox", **exact(8)).collect().token_ids


async def test_concurrent_greedy_streams_agree(aclient):
    # Batched together on the server, identical greedy requests still agree.
    results = await asyncio.gather(*(aclient.generate("Batch me", **exact(16)).collect() for _ in range(4)))
    assert all(r.token_ids == results[0].token_ids for r in results)
    assert all(len(r.token_ids) == 16 and r.finish_reason == pb.FINISH_REASON_LENGTH for r in results)
    assert len({r.request_id for r in results}) == 4


async def test_tokenize_detokenize_round_trip(aclient):
    text = "Streams of tokens, and back again."
    ids = (await aclient.tokenize(text)).token_ids
    assert await aclient.detokenize(ids) == text


async def test_embed(aclient, embedder):
    responses = await aclient.embed([*SIMILAR, UNRELATED], model=embedder.name)
    assert [r.index for r in responses] == [0, 1, 2]
    assert all(len(r.embedding) == embedder.embedding_dimensions for r in responses)
    assert all(math.isclose(math.sqrt(sum(x * x for x in r.embedding)), 1.0, abs_tol=1e-3) for r in responses)
    food, bread, stocks = (r.embedding for r in responses)
    assert cosine(food, bread) > cosine(food, stocks) + 0.2


async def test_embed_packed_int8(aclient, embedder):
    plain = await aclient.embed(SEVENTY, model=embedder.name)
    int8 = await aclient.embed(SEVENTY, model=embedder.name, packed=True, embedding_type="int8")
    assert int8.type == pb.EMBEDDING_TYPE_INT8 and len(int8) == 70 and int8.messages <= 2
    assert int8.tokens == [r.tokens for r in plain]
    assert min(cosine(q, r.embedding) for q, r in zip(int8.floats(), plain)) >= 0.999
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await aclient.embed(SIMILAR, model=embedder.name, embedding_type="ubinary")
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT, details.message
    assert [v.field for v in details.field_violations] == ["embedding_type"]


async def test_embed_truncate_none_refuses_an_over_long_input(aclient, embedder):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await aclient.embed([over_long(embedder)], model=embedder.name, truncate=pb.TRUNCATION_NONE)
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT, details.message
    assert [v.field for v in details.field_violations] == ["inputs[0]"]


async def test_invalid_temperature(aclient):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await aclient.generate("Hi", sampling={"temperature": -1}, max_tokens=4).collect()
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.field_violations] == ["sampling.temperature"]
    assert details.reason == "INVALID_FIELD" and details.error_info.domain == "mlxgrpc.v1"


async def test_unknown_model(aclient):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await aclient.embed(["x"], model="no-such-model")
    assert error_details(info.value).code == grpc.StatusCode.NOT_FOUND


async def test_prefetch_and_close_session(aclient):
    session = f"py-aio-{uuid.uuid4().hex}"
    await aclient.generate(SESSION_PROMPT, session_id=session, **exact(4)).collect()
    reply = await aclient.prefetch(SESSION_PROMPT, session_id=session)
    assert reply.tier == pb.CACHE_TIER_MEMORY
    assert 0 < reply.cached_tokens <= reply.prompt_tokens - 1
    assert await aclient.close_session(session) >= 1
    assert await aclient.close_session(session) == 0
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await aclient.prefetch(pb.PrefetchRequest())
    assert error_details(info.value).code == grpc.StatusCode.INVALID_ARGUMENT


async def test_cancel_rpc(aclient):
    stream = aclient.generate("Count forever:", **LONG)
    deltas = 0
    async for event in stream:
        if event.HasField("delta"):
            deltas += 1
            if deltas == 3:
                assert await aclient.cancel(stream.request_id) is True
    assert stream.result.finish_reason == pb.FINISH_REASON_CANCELLED
    assert stream.result.finished.usage.completion_tokens < 2000
    assert await stream.code() == grpc.StatusCode.OK


async def test_cancel_rpc_from_another_task(aclient):
    stream = aclient.generate("Count forever:", **LONG)

    async def cancel_soon():
        # The id is known before `started` arrives; retry until the server has the request.
        for _ in range(200):
            if await aclient.cancel(stream.request_id):
                return True
            await asyncio.sleep(0.02)
        return False

    result, cancelled = await asyncio.gather(stream.collect(), cancel_soon())
    assert cancelled is True
    assert result.finish_reason == pb.FINISH_REASON_CANCELLED


async def test_client_side_cancel(aclient):
    async with aclient.generate("Count forever:", **LONG) as stream:
        n = 0
        async for _ in stream:
            n += 1
            if n == 3:
                stream.cancel()
    assert n == 3  # iteration stopped right after the cancel, without an exception
    assert await stream.code() == grpc.StatusCode.CANCELLED
    assert stream.result.finished is None


async def test_task_cancellation_propagates(aclient):
    # Cancelling the consuming task is not swallowed as a client-side stream cancel.
    stream = aclient.generate("Count forever:", **LONG)
    task = asyncio.create_task(stream.collect())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stream.cancel()
