"""Prompt logprobs on a live server: every prompt token's log probability and its top
alternatives equal the log-softmax of the same model's own forward over the whole prompt
(mlx-lm, one call), on a prefix-cache miss and on a prompt the cache holds, with prefill
chunks of 8 tokens; the event comes once, after started and before any delta; bad values and
requests over --max-prompt-logprobs are INVALID_ARGUMENT naming the field; the vLLM worker
contract carries them as input_logprobs."""

from __future__ import annotations

import grpc
import mlx.core as mx
import mlx_lm
import pytest
import pytest_asyncio
from smg_grpc_proto import vllm_engine_pb2 as vllm_pb
from smg_grpc_proto import vllm_engine_pb2_grpc as vllm_grpc

from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.models import ModelSet
from engine.validation import Limits
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from tests.helpers import details, request
from tests.test_ops_security import extra_server
from tests.vision_helpers import encoded, image_chat, image_part

KINDS = ("llama", "qwen3")  # llama first: the worker contracts serve it
CHUNK = 8  # prefill chunk: the prompts below span several
BOUND = 400  # --max-prompt-logprobs
TOL = 1e-4  # absolute, or REL of the value where larger: chunks of 8 and the kernels sum float32
REL = 2e-5  # in another order than one whole forward (an AVX-512 CPU: 1.4e-5 seen at logprob -8)
PROMPTS = {
    "llama": "Once upon a time, in a small village by the sea, there lived an old fisherman "
             "who told stories about the stars, the tides and the wind every evening.",
    "qwen3": "In computer science, a hash table is a data structure that maps keys to values; "
             "it uses a hash function to compute an index into an array of buckets.",
}


def whole_forward(model, ids: list[int], top: int) -> list[tuple[float, list[tuple[int, float]]]]:
    """Per prompt token 1..n-1: its log-softmax and the ``top`` most likely ids there, from one
    forward of the model over the whole prompt."""
    logits = model(mx.array(ids)[None])[0].astype(mx.float32)
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    order = mx.argsort(-lp, axis=-1)[:, :top].tolist()
    values = lp.tolist()
    return [(values[p][ids[p + 1]], [(i, values[p][i]) for i in order[p]]) for p in range(len(ids) - 1)]


@pytest.fixture(scope="module")
def oracle(fixture_models):
    """Per kind: the prompt's ids and the whole forward's records (top 5)."""
    out = {}
    for kind in KINDS:
        model, tokenizer = mlx_lm.load(str(fixture_models[kind]))
        ids = tokenizer.encode(PROMPTS[kind])
        assert len(ids) > 4 * CHUNK
        out[kind] = (ids, whole_forward(model, ids, 5))
    return out


@pytest_asyncio.fixture(scope="module")
async def served(fixture_models, oracle):
    config = GenerationConfig(scheduler=SchedulerConfig(max_active=4, max_queued=8, prefill_chunk=CHUNK,
                                                        tick_tokens=24, min_prefill_tokens=4),
                              limits=Limits(max_prompt_logprobs=BOUND))
    models = ModelSet([GenerationEngine(str(fixture_models[k]), name=k, config=config) for k in KINDS], [])
    await models.start()
    async with extra_server(models) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield pb_grpc.InferenceServiceStub(channel), vllm_grpc.VllmEngineStub(channel)
    await models.close()


async def events(stub, req: pb.GenerateRequest) -> list[pb.GenerateResponse]:
    """Every event of the stream, in order; the order's rules checked."""
    out = [msg async for msg in stub.Generate(req)]
    kinds = [m.WhichOneof("event") for m in out]
    assert kinds[0] == "started" and kinds[-1] == "finished" and kinds.count("finished") == 1, kinds
    if req.HasField("prompt_logprobs"):
        assert kinds[1] == "prompt_logprobs" and kinds.count("prompt_logprobs") == 1, kinds
    else:
        assert "prompt_logprobs" not in kinds
    return out


def of(out: list[pb.GenerateResponse], which: str) -> list:
    return [getattr(m, which) for m in out if m.WhichOneof("event") == which]


def output_ids(out) -> list[int]:
    return [t for d in of(out, "delta") for t in d.token_ids]


def assert_matches(tokens, ids: list[int], reference, k: int) -> None:
    assert [t.token_id for t in tokens] == ids[1:]
    for t, (chosen, top) in zip(tokens, reference):
        assert t.logprob == pytest.approx(chosen, rel=REL, abs=TOL)
        assert [a.token_id for a in t.top_logprobs] == [i for i, _ in top[:k]]
        assert [a.logprob for a in t.top_logprobs] == pytest.approx([v for _, v in top[:k]], rel=REL, abs=TOL)
        assert all(a.text for a in t.top_logprobs)


@pytest.mark.parametrize("kind", KINDS)
async def test_prompt_logprobs_equal_a_whole_forward_on_a_miss_and_on_a_cached_prompt(served, oracle, kind):
    stub, _ = served
    ids, reference = oracle[kind]
    asked = request(PROMPTS[kind], model=kind, max_tokens=4, prompt_logprobs=3)
    first = await events(stub, asked)
    started, = of(first, "started")
    assert started.prompt_tokens == len(ids) and started.cached_tokens == 0
    scored, = of(first, "prompt_logprobs")
    assert len(scored.tokens) == started.prompt_tokens - 1
    assert_matches(scored.tokens, ids, reference, 3)

    plain = await events(stub, request(PROMPTS[kind], model=kind, max_tokens=4))
    assert of(plain, "started")[0].cached_tokens > 0  # the scored request published its prefix
    assert output_ids(plain) == output_ids(first)

    again = await events(stub, asked)  # the cache holds the prompt: recomputed, all of it
    assert of(again, "started")[0].cached_tokens == 0
    scored, = of(again, "prompt_logprobs")
    assert_matches(scored.tokens, ids, reference, 3)
    assert output_ids(again) == output_ids(first)


async def test_no_alternatives_and_a_one_token_prompt(served, oracle):
    stub, _ = served
    ids, reference = oracle["llama"]
    out = await events(stub, pb.GenerateRequest(model="llama", tokens=gen_pb.TokenIds(ids=ids), prompt_logprobs=0,
                                                stopping=gen_pb.StoppingCriteria(max_tokens=2)))
    scored, = of(out, "prompt_logprobs")
    assert_matches(scored.tokens, ids, reference, 0)
    out = await events(stub, pb.GenerateRequest(model="llama", tokens=gen_pb.TokenIds(ids=ids[:1]),
                                                prompt_logprobs=2, stopping=gen_pb.StoppingCriteria(max_tokens=2)))
    assert list(of(out, "prompt_logprobs")[0].tokens) == []  # nothing precedes the only token
    assert len(output_ids(out)) == 2


def refused_naming(err: grpc.aio.AioRpcError, field: str) -> str:
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert [v.field for v in details(err)["BadRequest"].field_violations] == [field]
    return err.details()


@pytest.mark.parametrize("k", [-1, 21])
async def test_out_of_range_is_invalid_argument(served, k):
    stub, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await events(stub, request("Hello", prompt_logprobs=k))
    assert "between 0 and 20" in refused_naming(err.value, "prompt_logprobs")


async def test_over_the_bound_is_refused_text_and_tokens(served, oracle):
    stub, _ = served
    ids, _ = oracle["llama"]
    over = BOUND // len(ids)  # len(ids) x (1 + over) > BOUND
    assert len(ids) * over <= BOUND < len(ids) * (1 + over)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await events(stub, request(PROMPTS["llama"], max_tokens=2, prompt_logprobs=over))
    assert str(BOUND) in refused_naming(err.value, "prompt_logprobs")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await events(stub, pb.GenerateRequest(model="llama", tokens=gen_pb.TokenIds(ids=ids), prompt_logprobs=over,
                                              stopping=gen_pb.StoppingCriteria(max_tokens=2)))
    refused_naming(err.value, "prompt_logprobs")
    within = await events(stub, request(PROMPTS["llama"], max_tokens=2, prompt_logprobs=over - 1))
    assert len(of(within, "prompt_logprobs")[0].tokens) == len(ids) - 1


async def test_an_image_prompt_is_refused_by_name(served):
    stub, _ = served
    req = image_chat("What is it?", image_part(encoded((200, 30, 40), (32, 32))), model="llama", prompt_logprobs=1)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await events(stub, req)
    assert "images" in refused_naming(err.value, "prompt_logprobs")


def tokenized(ids, *, stream: bool, **sampling) -> vllm_pb.GenerateRequest:
    return vllm_pb.GenerateRequest(tokenized=vllm_pb.TokenizedInput(input_ids=ids), stream=stream,
                                   sampling_params=vllm_pb.SamplingParams(**{"temperature": 0.0, **sampling}))


@pytest.mark.parametrize("stream", [True, False])
async def test_the_vllm_contract_carries_them_as_input_logprobs(served, oracle, stream):
    _, worker = served
    ids, reference = oracle["llama"]
    replies = [r async for r in worker.Generate(tokenized(ids, stream=stream, max_tokens=3, prompt_logprobs=2))]
    carrying = [getattr(r, r.WhichOneof("response")) for r in replies]
    carrying = [m for m in carrying if m.HasField("input_logprobs")]
    assert len(carrying) == 1
    assert replies[0 if stream else -1].WhichOneof("response") == ("chunk" if stream else "complete")
    assert getattr(replies[0 if stream else -1], "chunk" if stream else "complete") == carrying[0]
    got = carrying[0].input_logprobs
    assert list(got.token_ids) == ids
    assert not got.token_logprobs[0].HasField("value") and not got.top_logprobs[0].token_ids
    assert [v.value for v in got.token_logprobs[1:]] == pytest.approx([c for c, _ in reference], rel=REL, abs=TOL)
    for top, (_, expected) in zip(got.top_logprobs[1:], reference):
        assert list(top.token_ids) == [i for i, _ in expected[:2]]
        assert list(top.values) == pytest.approx([v for _, v in expected[:2]], rel=REL, abs=TOL)


async def test_the_vllm_contract_refuses_every_token_of_the_vocabulary(served, oracle):
    _, worker = served
    ids, _ = oracle["llama"]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in worker.Generate(tokenized(ids, stream=True, max_tokens=2, prompt_logprobs=-1)):
            pass
    refused_naming(err.value, "sampling_params.prompt_logprobs")


async def test_each_vllm_sample_gets_them_on_its_first_chunk(served, oracle):
    _, worker = served
    ids, reference = oracle["llama"]
    seen: dict[int, list[bool]] = {}
    async for r in worker.Generate(tokenized(ids, stream=True, max_tokens=3, prompt_logprobs=0, n=2, seed=3,
                                             temperature=1.0)):
        message = getattr(r, r.WhichOneof("response"))
        seen.setdefault(message.index, []).append(message.HasField("input_logprobs"))
        if message.HasField("input_logprobs"):
            got = message.input_logprobs
            expected = [c for c, _ in reference]
            assert [v.value for v in got.token_logprobs[1:]] == pytest.approx(expected, rel=REL, abs=TOL)
            assert not got.top_logprobs  # no alternatives asked
    assert sorted(seen) == [0, 1] and all(flags[0] and not any(flags[1:]) for flags in seen.values()), seen
