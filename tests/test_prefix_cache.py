"""Prefix reuse: hits report cached tokens and never change the output."""

from __future__ import annotations

import uuid

import mlx.core as mx
from mlx_lm.models.cache import KVCache

import pytest

from engine.caches.exact import exact
from engine.caches.prefix import PrefixCache
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.helpers import generate, request

LONG_PROMPT = ("In the harbour town the boats came home at dusk, and the keepers of the light "
               "counted them one by one while the gulls circled over the grey water. ") * 2


def _filled(tokens: int, width: int = 4) -> list[KVCache]:
    cache = KVCache()
    cache.update_and_fetch(mx.ones((1, 2, tokens, width)), mx.ones((1, 2, tokens, width)))
    return [cache]


def test_take_returns_owned_state_and_leaves_one_token_to_compute():
    cache = PrefixCache(max_bytes=1 << 30)
    cache.put([1, 2, 3, 4], _filled(4), "m")
    hit = cache.take([1, 2, 3, 4, 5, 6], "m")
    assert hit.tokens == [1, 2, 3, 4]
    hit.caches[0].update_and_fetch(mx.zeros((1, 2, 1, 4)), mx.zeros((1, 2, 1, 4)))  # caller owns it
    again = cache.take([1, 2, 3, 4, 5, 6], "m")
    assert again.caches[0].offset == 4
    exact = cache.take([1, 2, 3, 4], "m")  # never the whole prompt: the last token is computed
    assert exact.tokens == [1, 2, 3] and exact.caches[0].offset == 3
    assert cache.take([1, 2, 3, 4, 5], "other-namespace") is None
    assert cache.take([9, 9, 9], "m") is None


def test_put_evicts_least_recently_used_by_bytes():
    # an entry counts its content (not a 256-position buffer), plus at most two pages
    # per array when MLX hands it a slightly larger freed buffer
    one = exact(_filled(4, 8192))[0].nbytes
    cache = PrefixCache(max_bytes=2 * one + one // 2)
    for first in (10, 20, 30):
        cache.put([first, 1, 2, 3], _filled(4, 8192), "m")
    assert cache.nbytes <= cache.max_bytes and len(cache) == 2
    assert cache.take([10, 1, 2, 3, 4], "m") is None
    assert cache.take([30, 1, 2, 3, 4], "m") is not None


async def test_repeated_prompt_hits_and_output_is_identical(stub):
    for kind in ("llama", "sliding", "lfm2"):
        cold = await generate(stub, request(LONG_PROMPT, model=kind, max_tokens=12, bypass_prefix_cache=True))
        assert cold.started.cached_tokens == 0
        first = await generate(stub, request(LONG_PROMPT, model=kind, max_tokens=12))
        warm = await generate(stub, request(LONG_PROMPT, model=kind, max_tokens=12))
        assert warm.started.cached_tokens > 0
        assert warm.finished.usage.cached_tokens == warm.started.cached_tokens
        assert cold.token_ids == first.token_ids == warm.token_ids, kind


@pytest.mark.parametrize("kind", ["qwen3", "lfm2"])
async def test_a_continuation_reuses_prompt_and_output(stub, kind):
    """The finished state (prompt plus output) serves the next request that extends
    it: trimmed for KV caches, exactly for recurrent state (stored where it is exact)."""
    first = await generate(stub, request("The keeper counted the boats", model=kind, max_tokens=10))
    prompt_ids = (await stub.Tokenize(pb.TokenizeRequest(model=kind, text="The keeper counted the boats"))).token_ids
    follow = list(prompt_ids) + first.token_ids + list(prompt_ids)
    hit = await generate(stub, pb.GenerateRequest(model=kind, tokens=gen_pb.TokenIds(ids=follow),
                                                  stopping=gen_pb.StoppingCriteria(max_tokens=6)))
    assert hit.started.cached_tokens >= len(prompt_ids) + len(first.token_ids) - 1
    cold = await generate(stub, pb.GenerateRequest(model=kind, tokens=gen_pb.TokenIds(ids=follow),
                                                   stopping=gen_pb.StoppingCriteria(max_tokens=6),
                                                   bypass_prefix_cache=True))
    assert hit.token_ids == cold.token_ids


@pytest.mark.parametrize("kind", ["sliding", "lfm2"])
async def test_chat_history_is_reused_by_the_next_turn(stub, kind):
    history = [gen_pb.ChatMessage(role="system", content="You are a lighthouse keeper. " * 4),
               gen_pb.ChatMessage(role="user", content="How many boats came home?")]
    turn = lambda *extra: pb.GenerateRequest(  # noqa: E731
        model=kind, chat=gen_pb.ChatMessages(messages=history + list(extra)),
        stopping=gen_pb.StoppingCriteria(max_tokens=5))
    await generate(stub, turn())
    later = (gen_pb.ChatMessage(role="assistant", content="Seven."),
             gen_pb.ChatMessage(role="user", content="And the gulls?"))
    second = await generate(stub, turn(*later))
    assert second.started.cached_tokens > 20
    cold = turn(*later)
    cold.bypass_prefix_cache = True
    assert (await generate(stub, cold)).token_ids == second.token_ids


async def test_fresh_session_ids_leave_nothing_behind(stub):
    """A client sending a new session_id with every request must not grow the server:
    nothing in the prefix cache is kept per session."""
    import tracemalloc

    await generate(stub, request("Hello", model="llama", max_tokens=1, session_id="warm-up"))
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(150):
            await generate(stub, request("Hello there", model="llama", max_tokens=1,
                                         session_id=f"session-{i:04d}-" + "x" * 100))
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename")
                if s.traceback[0].filename.endswith(("caches/prefix.py", "caches/sessions.py",
                                                             "scheduling/reuse.py")))
    assert grown < 16 * 1024, f"{grown} bytes kept for 150 sessions"


async def test_a_request_ending_in_its_first_step_stores_its_prompt_for_the_next(stub):
    """Its prompt is stored as it retires (not before its first step): the next request of the
    same prompt reuses all of it but the one token it must compute, and answers the same."""
    prompt = f"Log {uuid.uuid4().hex}. " + LONG_PROMPT  # a prefix no earlier request stored
    first = await generate(stub, request(prompt, model="llama", max_tokens=1))
    assert first.started.cached_tokens == 0
    again = await generate(stub, request(prompt, model="llama", max_tokens=1))
    assert again.started.cached_tokens == again.started.prompt_tokens - 1
    assert again.token_ids == first.token_ids
