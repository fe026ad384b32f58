"""Greedy tokens through gRPC equal mlx-lm's, alone and inside a busy batch."""

from __future__ import annotations

import asyncio

import pytest

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from tests.conftest import FIXTURE_KINDS
from tests.helpers import generate, request
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS


@pytest.mark.parametrize("kind", FIXTURE_KINDS)
async def test_greedy_alone_matches_mlx_lm(stub, oracle, kind):
    for name, prompt in ORACLE_PROMPTS.items():
        out = await generate(stub, request(prompt, model=kind, max_tokens=ORACLE_TOKENS[name]))
        assert out.token_ids == oracle[kind][name], f"{kind}/{name}"
        assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH
        assert out.finished.usage.completion_tokens == ORACLE_TOKENS[name]


@pytest.mark.parametrize("kind", FIXTURE_KINDS)
async def test_greedy_in_batch_of_eight_matches_mlx_lm(stub, oracle, kind):
    """All eight prompts (different lengths and output lengths) run at once, so
    rows join and leave the batch while others decode."""
    names = list(ORACLE_PROMPTS)
    results = await asyncio.gather(*(
        generate(stub, request(ORACLE_PROMPTS[n], model=kind, max_tokens=ORACLE_TOKENS[n])) for n in names))
    for name, out in zip(names, results):
        assert out.token_ids == oracle[kind][name], f"{kind}/{name}"


@pytest.mark.parametrize("kind", FIXTURE_KINDS)
async def test_staggered_arrivals_match_mlx_lm(stub, oracle, kind):
    """Requests arriving while others are mid-decode join the running batch."""
    names = list(ORACLE_PROMPTS)

    async def delayed(i, name):
        await asyncio.sleep(0.05 * i)
        return await generate(stub, request(ORACLE_PROMPTS[name], model=kind, max_tokens=ORACLE_TOKENS[name]))

    results = await asyncio.gather(*(delayed(i, n) for i, n in enumerate(names)))
    for name, out in zip(names, results):
        assert out.token_ids == oracle[kind][name], f"{kind}/{name}"


@pytest.mark.parametrize("kind", FIXTURE_KINDS)
async def test_repeated_batch_with_the_prefix_cache_warm_matches_mlx_lm(stub, oracle, kind):
    """The same eight prompts again: every row starts from a prefix cache hit."""
    names = list(ORACLE_PROMPTS)
    results = await asyncio.gather(*(
        generate(stub, request(ORACLE_PROMPTS[n], model=kind, max_tokens=ORACLE_TOKENS[n])) for n in names))
    for name, out in zip(names, results):
        assert out.token_ids == oracle[kind][name], f"{kind}/{name}"
        if name != "one":  # a one-token prompt has nothing to reuse
            assert out.started.cached_tokens > 0, f"{kind}/{name}"
