"""An engine failure mid-stream ends that stream with INTERNAL (no traceback leaks
to the client), frees everything, and the engine keeps serving correctly."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.helpers import details, generate, request
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS
from tests.probe import probe
from tests.test_cancellation import read_rest, read_until_delta, settled


def _fail_next(target: object, attribute: str):
    """Makes ``target.attribute`` raise once, then restores it (runs on the engine thread)."""
    def inject(_scheduler):
        original = getattr(target, attribute)

        def boom(*args, **kwargs):
            setattr(target, attribute, original)
            raise RuntimeError("injected fault")

        setattr(target, attribute, boom)
    return inject


async def test_failed_decode_step_ends_the_stream_with_internal(stub, server, oracle):
    engine = server["models"].generator("sliding")
    call = stub.Generate(request("Hello", model="sliding", max_tokens=2000))
    await read_until_delta(call)
    scheduler_batch = await asyncio.wrap_future(probe(engine, lambda s: s._batch))
    await asyncio.wrap_future(probe(engine, _fail_next(scheduler_batch, "forward")))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await read_rest(call)
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "Traceback" not in err.value.details() and "injected" not in err.value.details()
    assert details(err.value)["ErrorInfo"].reason == "ENGINE_FAILURE"
    await settled(server, "sliding")
    name = "medium"
    out = await generate(stub, request(ORACLE_PROMPTS[name], model="sliding", max_tokens=ORACLE_TOKENS[name]))
    assert out.token_ids == oracle["sliding"][name]


async def test_failed_admission_on_the_engine_thread_fails_only_that_request(stub, server):
    engine = server["models"].generator("qwen3")
    await asyncio.wrap_future(probe(engine, lambda s: _fail_next(s, "_start")(s)))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request("Hello", model="qwen3", max_tokens=4))
    assert err.value.code() == grpc.StatusCode.INTERNAL
    await settled(server, "qwen3")
    out = await generate(stub, request("Hello", model="qwen3", max_tokens=4))
    assert len(out.token_ids) == 4


async def test_a_failure_while_storing_a_prefix_drops_the_entry_not_the_request(stub, server, oracle):
    engine = server["models"].generator("lfm2")
    cache = await asyncio.wrap_future(probe(engine, lambda s: s.prefix_cache))
    entries = len(cache)
    for _ in range(3):  # fail every store this request makes: at join and at finish
        await asyncio.wrap_future(probe(engine, _fail_next(cache, "put")))
        name = "digits"
        out = await generate(stub, request(ORACLE_PROMPTS[name], model="lfm2", max_tokens=ORACLE_TOKENS[name]))
        assert out.token_ids == oracle["lfm2"][name]
    await settled(server, "lfm2")
    assert len(cache) >= entries
