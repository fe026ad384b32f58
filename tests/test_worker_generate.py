"""SMG's worker contract (mlx.grpc.engine.MlxEngine) on the session server: Generate
against the mlx-lm oracle, sampling parameters, errors and Abort. The contract
serves the default generation model (llama)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
from smg_grpc_proto import mlx_engine_pb2_grpc as mlx_grpc

from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.helpers import details
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS

NAMES = list(ORACLE_PROMPTS)[:3]


@pytest.fixture(scope="module")
def worker(channel):
    return mlx_grpc.MlxEngineStub(channel)


async def prompt_ids(stub, text: str) -> list[int]:
    return list((await stub.Tokenize(pb.TokenizeRequest(model="llama", text=text, add_special_tokens=True))).token_ids)


def tokenized(ids, *, stream=True, request_id="", **sampling) -> mlx_pb.GenerateRequest:
    sampling.setdefault("temperature", 0.0)
    return mlx_pb.GenerateRequest(request_id=request_id, tokenized=mlx_pb.TokenizedInput(input_ids=ids),
                                  sampling_params=mlx_pb.SamplingParams(**sampling), stream=stream)


async def collect(worker, req) -> tuple[list[mlx_pb.GenerateStreamChunk], mlx_pb.GenerateComplete]:
    responses = [r async for r in worker.Generate(req)]
    assert responses[-1].HasField("complete") and all(r.HasField("chunk") for r in responses[:-1])
    return [r.chunk for r in responses[:-1]], responses[-1].complete


async def test_streamed_generate_matches_mlx_lm_with_running_totals(stub, worker, oracle):
    for name in NAMES:
        ids = await prompt_ids(stub, ORACLE_PROMPTS[name])
        chunks, complete = await collect(worker, tokenized(ids, max_tokens=ORACLE_TOKENS[name]))
        tokens = [t for c in chunks for t in c.token_ids]
        assert tokens == oracle["llama"][name], name
        counts = [c.completion_tokens for c in chunks]
        assert counts == [sum(len(c.token_ids) for c in chunks[: i + 1]) for i in range(len(chunks))]
        assert {c.prompt_tokens for c in chunks} == {len(ids)}
        assert complete.finish_reason == "length" and not complete.output_ids
        assert (complete.prompt_tokens, complete.completion_tokens) == (len(ids), ORACLE_TOKENS[name])


async def test_text_input_and_an_unstreamed_request_give_the_same_tokens(stub, worker, oracle):
    name = NAMES[1]
    req = mlx_pb.GenerateRequest(text=ORACLE_PROMPTS[name], stream=False, sampling_params=mlx_pb.SamplingParams(
        temperature=0.0, max_tokens=ORACLE_TOKENS[name]))
    responses = [r async for r in worker.Generate(req)]
    assert len(responses) == 1
    assert list(responses[0].complete.output_ids) == oracle["llama"][name]
    assert responses[0].complete.completion_tokens == ORACLE_TOKENS[name]


async def test_logprobs_match_a_direct_softmax(stub, worker, logprob_reference):
    ids = await prompt_ids(stub, "Hello world")
    _, complete = await collect(worker, tokenized(ids, stream=False, max_tokens=3, logprobs=5))
    lp = complete.output_logprobs
    assert list(lp.token_ids) == list(complete.output_ids) and len(lp.token_logprobs) == 3
    assert len(lp.top_logprobs) == 3 and all(len(t.values) == 5 for t in lp.top_logprobs)
    first = lp.top_logprobs[0]
    assert list(first.token_ids) == [i for i, _ in logprob_reference]
    assert list(first.values) == pytest.approx([v for _, v in logprob_reference], abs=1e-4)
    assert lp.token_logprobs[0] == pytest.approx(first.values[0], abs=1e-6)  # greedy: the top one

    chunks, _ = await collect(worker, tokenized(ids, max_tokens=3, logprobs=0))
    assert [len(c.output_logprobs.token_logprobs) for c in chunks] == [1, 1, 1]
    assert all(not t.values for c in chunks for t in c.output_logprobs.top_logprobs)


async def test_sampling_parameters_reach_the_engine(stub, worker, oracle):
    ids = await prompt_ids(stub, ORACLE_PROMPTS[NAMES[0]])
    greedy = oracle["llama"][NAMES[0]]

    async def tokens(**sampling) -> list[int]:
        _, complete = await collect(worker, tokenized(ids, stream=False, max_tokens=12, **sampling))
        return list(complete.output_ids)

    hot = await tokens(temperature=5.0, seed=7)
    assert hot == await tokens(temperature=5.0, seed=7) and hot != await tokens(temperature=5.0, seed=8)
    unset = mlx_pb.SamplingParams(seed=7, max_tokens=12)  # temperature unset: 1.0, the OpenAI default
    assert [r async for r in worker.Generate(mlx_pb.GenerateRequest(
        tokenized=mlx_pb.TokenizedInput(input_ids=ids), sampling_params=unset, stream=False))][0].complete.output_ids \
        == await tokens(temperature=1.0, seed=7)
    assert set(await tokens(logit_bias={5: 100.0})) == {5}

    stop_at = next(i for i, t in enumerate(greedy) if t not in greedy[:i] and i >= 2)
    _, complete = await collect(worker, tokenized(ids, max_tokens=12, stop_token_ids=[greedy[stop_at]]))
    assert complete.finish_reason == "stop" and complete.matched_stop_token_id == greedy[stop_at]
    assert complete.completion_tokens == stop_at  # the stop token itself is not emitted


@pytest.mark.parametrize("req, field", [
    (mlx_pb.GenerateRequest(tokenized=mlx_pb.TokenizedInput(input_ids=[1, 2]),
                            sampling_params=mlx_pb.SamplingParams(top_p=2.0)), "sampling_params.top_p"),
    (mlx_pb.GenerateRequest(tokenized=mlx_pb.TokenizedInput(input_ids=[1, 99999])), "tokenized.input_ids"),
    (mlx_pb.GenerateRequest(tokenized=mlx_pb.TokenizedInput(input_ids=[1, 2]),
                            sampling_params=mlx_pb.SamplingParams(max_tokens=100000)), "sampling_params.max_tokens"),
    (mlx_pb.GenerateRequest(tokenized=mlx_pb.TokenizedInput(input_ids=[1, 2]),
                            sampling_params=mlx_pb.SamplingParams(logprobs=99)), "sampling_params.logprobs"),
    (mlx_pb.GenerateRequest(), "input"),
    (mlx_pb.GenerateRequest(request_id="i" * 129, tokenized=mlx_pb.TokenizedInput(input_ids=[1, 2])), "request_id"),
    (mlx_pb.GenerateRequest(tokenized=mlx_pb.TokenizedInput(input_ids=[1] * 4096)), "tokenized.input_ids"),
    (mlx_pb.GenerateRequest(tokenized=mlx_pb.TokenizedInput(input_ids=[1, 2]),
                            sampling_params=mlx_pb.SamplingParams(stop_token_ids=[1] * 1025)),
     "sampling_params.stop_token_ids"),
])
async def test_invalid_fields_name_the_contracts_field(worker, req, field):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        [r async for r in worker.Generate(req)]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    found = details(err.value)
    assert found["BadRequest"].field_violations[0].field == field
    assert found["ErrorInfo"].domain == "mlxgrpc.v1" and found["ErrorInfo"].reason == "INVALID_FIELD"


async def test_counts_are_checked_before_the_request_is_converted(worker, monkeypatch):
    """The same limits as our Generate, measured on the wire message first."""
    def unreachable(_msg):
        raise AssertionError("converted before its counts were checked")

    monkeypatch.setattr("service.worker.convert.generation_request", unreachable)
    for req, field in ((tokenized([1] * 300_000), "tokenized.input_ids"),
                       (tokenized([1, 2], logit_bias={i: 1.0 for i in range(2000)}), "sampling_params.logit_bias")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            [r async for r in worker.Generate(req)]
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert details(err.value)["BadRequest"].field_violations[0].field == field


async def read_rest(call) -> list[mlx_pb.GenerateResponse]:
    out = []
    while (message := await call.read()) is not grpc.aio.EOF:
        out.append(message)
    return out


async def wait_idle(stub, timeout: float = 10.0) -> pb.ModelLoad:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        load = (await stub.GetLoad(pb.GetLoadRequest(model="llama"))).models[0]
        if load.running_requests == 0 and load.kv_cache_bytes == 0:
            return load
        assert asyncio.get_running_loop().time() < deadline, load
        await asyncio.sleep(0.05)


async def test_abort_ends_many_requests_and_frees_their_rows(stub, worker):
    ids = await prompt_ids(stub, "Tell me a long story")
    calls = [worker.Generate(tokenized(ids, max_tokens=2000, request_id=f"smg-abort-{i}")) for i in range(2)]
    for call in calls:
        assert (await call.read()).HasField("chunk")
    with pytest.raises(grpc.aio.AioRpcError) as err:  # the id is taken while it runs
        [r async for r in worker.Generate(tokenized(ids, max_tokens=2, request_id="smg-abort-0"))]
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS

    await worker.Abort(mlx_pb.AbortRequest(request_ids=["smg-abort-0", "smg-abort-1", "never-seen"]))
    for call in calls:
        rest = await read_rest(call)
        assert rest[-1].complete.finish_reason == "abort" and rest[-1].complete.completion_tokens < 2000
    await wait_idle(stub)


async def test_a_dropped_stream_frees_its_row(stub, worker):
    ids = await prompt_ids(stub, "Another long story")
    call = worker.Generate(tokenized(ids, max_tokens=2000))
    await call.read()
    busy = (await stub.GetLoad(pb.GetLoadRequest(model="llama"))).models[0]
    assert busy.running_requests == 1 and busy.kv_cache_bytes > 0
    call.cancel()
    before = busy.generated_tokens
    load = await wait_idle(stub)
    assert load.generated_tokens - before < 1900  # it stopped, it did not run to the end
