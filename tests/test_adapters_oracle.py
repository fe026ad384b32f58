"""Generation with adapters through gRPC equals mlx-lm loaded with the adapter,
token for token: alone, in one batch mixing three adapters and the base model, and
with speculative decoding (n-gram drafts, a draft model's); constrained rows with an
adapter keep their tokens in every speculation mode. The prefix cache never shares
KV across adapters; metrics count each adapter."""

from __future__ import annotations

import asyncio

import pytest

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.metrics import scrape
from tests.adapter_helpers import keep_only
from tests.conftest import ADAPTER_PROMPTS, ADAPTERS_BY_MODEL, SELF_DRAFTED
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


async def test_speculation_with_adapters_matches_mlx_lm_loaded_with_them(stub, fixture_adapters, adapter_oracle):
    """Each row's drafts are verified by the model with the row's adapter: n-gram drafts
    and a draft model's (the draft model runs without adapters, so it proposes base
    tokens) leave every adapter's output exactly as mlx-lm gives it, in batches mixing
    adapters, the base model and both modes. On the session server's llama drafted by
    itself; the adapters are loaded for this test only."""
    names = ["tone", "qv", "dora"]
    for name in names:
        await stub.LoadAdapter(pb.LoadAdapterRequest(model=SELF_DRAFTED, name=name, path=str(fixture_adapters[name])))
    try:
        modes = (gen_pb.SPECULATION_MODE_NGRAM, gen_pb.SPECULATION_MODE_DRAFT)
        cases = [(a, p, m) for p in ADAPTER_PROMPTS for a in ("", *names) for m in modes]
        results = []
        for wave in (cases[:16], cases[16:]):  # within the server's running and queued limits
            results += await asyncio.gather(*(
                generate(stub, request(ORACLE_PROMPTS[p], model=SELF_DRAFTED, adapter=a, max_tokens=ORACLE_TOKENS[p],
                                       speculation=gen_pb.SpeculationOptions(mode=m, num_draft_tokens=4)))
                for a, p, m in wave))
        for (adapter, prompt, mode), out in zip(cases, results):
            assert out.token_ids == adapter_oracle[("llama", adapter)][prompt], \
                f"{adapter or 'base'}/{prompt}/{gen_pb.SpeculationMode.Name(mode)}"
        drafted = [out.finished.usage for (a, _, m), out in zip(cases, results) if a and m == modes[1]]
        assert sum(u.draft_tokens for u in drafted) > 0  # adapter rows were verified, not skipped
        base = [out.finished.usage for (a, _, m), out in zip(cases, results) if not a and m == modes[1]]
        assert all(u.draft_tokens > 0 and u.accepted_draft_tokens >= 0.8 * u.draft_tokens
                   for u in base)  # the draft model is the base itself
    finally:
        for name in names:
            await stub.UnloadAdapter(pb.UnloadAdapterRequest(model=SELF_DRAFTED, name=name))


async def test_constrained_rows_with_adapters_keep_their_tokens_in_every_speculation_mode(stub, fixture_adapters):
    """A row with an adapter and a response format is masked by its grammar and verified
    with its adapter: off, n-gram and draft-model speculation give the same constrained
    tokens, alone and batched beside the base model's constrained rows."""
    await stub.LoadAdapter(pb.LoadAdapterRequest(model=SELF_DRAFTED, name="tone", path=str(fixture_adapters["tone"])))
    try:
        fmt = gen_pb.ResponseFormat(regex=r"[^\n]{0,40}\n")
        modes = (gen_pb.SPECULATION_MODE_OFF, gen_pb.SPECULATION_MODE_NGRAM, gen_pb.SPECULATION_MODE_DRAFT)
        requests = [request("Once upon a time", model=SELF_DRAFTED, adapter=adapter, max_tokens=40,
                            response_format=fmt, speculation=gen_pb.SpeculationOptions(mode=mode, num_draft_tokens=4))
                    for adapter in ("tone", "") for mode in modes]
        alone = [await generate(stub, r) for r in requests]
        together = await asyncio.gather(*(generate(stub, r) for r in requests))
        tuned, base = alone[0], alone[len(modes)]
        for i, out in enumerate(alone + list(together)):
            expected = tuned if requests[i % len(requests)].adapter else base
            assert (out.token_ids, out.text) == (expected.token_ids, expected.text), i
            assert out.finished.reason == gen_pb.FINISH_REASON_STOP and out.text.endswith("\n")
        assert tuned.token_ids != base.token_ids  # the adapter is applied under the mask
    finally:
        await stub.UnloadAdapter(pb.UnloadAdapterRequest(model=SELF_DRAFTED, name="tone"))


async def test_a_prediction_with_an_adapter_keeps_the_adapters_tokens(stub, fixture_adapters, adapter_oracle):
    """A row's prediction is verified by the model with the row's adapter: a prediction of
    the base model's output (wrong for the adapter) and one of the adapter's own output
    both leave the adapter's tokens as mlx-lm gives them, one request at a time so the
    drafts are verified."""
    await stub.LoadAdapter(pb.LoadAdapterRequest(model=SELF_DRAFTED, name="tone", path=str(fixture_adapters["tone"])))
    try:
        for prompt in ADAPTER_PROMPTS:
            want = adapter_oracle[("llama", "tone")][prompt]
            for guess in (adapter_oracle[("llama", "")][prompt], want):
                out = await generate(stub, request(ORACLE_PROMPTS[prompt], model=SELF_DRAFTED, adapter="tone",
                                                   max_tokens=ORACLE_TOKENS[prompt],
                                                   prediction=gen_pb.Prediction(tokens=gen_pb.TokenIds(ids=guess))))
                assert out.token_ids == want, prompt
            assert out.finished.usage.accepted_prediction_tokens > 0
    finally:
        await stub.UnloadAdapter(pb.UnloadAdapterRequest(model=SELF_DRAFTED, name="tone"))
