"""Generation with adapters through gRPC equals mlx-lm loaded with the adapter,
token for token: alone, and in one batch mixing three adapters and the base model.
The prefix cache never shares KV across adapters; metrics count each adapter."""

from __future__ import annotations

import asyncio

import pytest

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.metrics import scrape
from tests.adapter_helpers import keep_only
from tests.conftest import ADAPTER_PROMPTS, ADAPTERS_BY_MODEL
from tests.helpers import generate, request
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS

ALONE = [(kind, name) for kind, names in ADAPTERS_BY_MODEL.items() for name in names if name != "small"]


@pytest.mark.parametrize("kind, adapter", ALONE)
async def test_an_adapter_alone_matches_mlx_lm_loaded_with_it(adapter_server, fixture_adapters, adapter_oracle,
                                                              kind, adapter):
    stub = adapter_server["stub"]
    if kind == "llama":
        await keep_only(stub, kind, ["tone", "qv", "dora"], fixture_adapters)
    for prompt in ADAPTER_PROMPTS:
        out = await generate(stub, request(ORACLE_PROMPTS[prompt], model=kind, adapter=adapter,
                                           max_tokens=ORACLE_TOKENS[prompt]))
        assert out.token_ids == adapter_oracle[(kind, adapter)][prompt], f"{kind}/{adapter or 'base'}/{prompt}"
        assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH


def test_the_adapters_change_the_output(adapter_oracle):
    """Otherwise the oracle tests could not tell an adapter from the base."""
    for kind, names in ADAPTERS_BY_MODEL.items():
        outputs = [adapter_oracle[(kind, name)][prompt] for name in names for prompt in ADAPTER_PROMPTS]
        assert len({tuple(o) for o in outputs}) == len(outputs), kind


async def test_a_batch_mixing_three_adapters_and_the_base_matches_mlx_lm(adapter_server, fixture_adapters,
                                                                        adapter_oracle):
    """Sixteen requests at once (eight rows run, eight wait): rows of different
    adapters prefill together and decode in the same steps; run twice, the second
    time with the prefix cache warm in each adapter's namespace."""
    stub = adapter_server["stub"]
    await keep_only(stub, "llama", ["tone", "qv", "dora"], fixture_adapters)
    cases = [(adapter, prompt) for prompt in ADAPTER_PROMPTS for adapter in ("tone", "", "qv", "dora")]
    for _ in range(2):
        results = await asyncio.gather(*(
            generate(stub, request(ORACLE_PROMPTS[p], model="llama", adapter=a, max_tokens=ORACLE_TOKENS[p]))
            for a, p in cases))
        for (adapter, prompt), out in zip(cases, results):
            assert out.token_ids == adapter_oracle[("llama", adapter)][prompt], f"{adapter or 'base'}/{prompt}"
    assert any(out.started.cached_tokens for out in results)


async def test_the_prefix_cache_never_shares_kv_across_adapters(adapter_server, fixture_adapters, adapter_oracle):
    stub = adapter_server["stub"]
    await keep_only(stub, "llama", ["tone", "qv"], fixture_adapters)
    text, n = ORACLE_PROMPTS["list"], 6  # a prompt no other test sends here

    async def run(adapter):
        return (await generate(stub, request(text, model="llama", adapter=adapter, max_tokens=n))).started

    assert (await run("")).cached_tokens == 0
    assert (await run("")).cached_tokens > 0  # the base reuses its own entry
    assert (await run("tone")).cached_tokens == 0  # never the base's KV
    assert (await run("tone")).cached_tokens > 0
    assert (await run("qv")).cached_tokens == 0  # nor another adapter's
    await keep_only(stub, "llama", ["qv"], fixture_adapters)
    await keep_only(stub, "llama", ["qv", "tone"], fixture_adapters)
    assert (await run("tone")).cached_tokens == 0  # nor that of an earlier load of the name


async def test_metrics_count_each_adapter(adapter_server, fixture_adapters):
    stub = adapter_server["stub"]
    await keep_only(stub, "lfm2", ["hybrid"], fixture_adapters)
    await generate(stub, request("Hello world", model="lfm2", adapter="hybrid", max_tokens=5))
    text = scrape(adapter_server["metrics"].registry)
    assert 'mlxgrpc_adapter_generated_tokens_total{adapter="hybrid",model="lfm2"}' in text
    assert 'mlxgrpc_adapter_requests_total{adapter="hybrid",code="OK",model="lfm2"}' in text
    assert 'mlxgrpc_adapter_active_requests{adapter="hybrid",model="lfm2"} 0.0' in text
    assert 'mlxgrpc_adapter_bytes{adapter="hybrid",model="lfm2"}' in text
