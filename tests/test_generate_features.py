"""Sampling, stopping, logprobs and delivery through the live server."""

from __future__ import annotations

import asyncio
import math

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.helpers import generate, request

SAMPLED = gen_pb.SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=1234)


async def test_seeded_sampling_is_identical_alone_and_in_a_batch(stub):
    alone = await generate(stub, request("Hello world", model="qwen3", max_tokens=16, sampling=SAMPLED))
    others = [request(f"Filler number {i} with other words", model="qwen3", max_tokens=10 + i,
                      sampling=gen_pb.SamplingParams(temperature=1.0, seed=i)) for i in range(6)]
    batched, *_ = await asyncio.gather(
        generate(stub, request("Hello world", model="qwen3", max_tokens=16, sampling=SAMPLED)),
        *(generate(stub, r) for r in others))
    assert batched.token_ids == alone.token_ids
    other_seed = gen_pb.SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=4321)
    different = await generate(stub, request("Hello world", model="qwen3", max_tokens=16, sampling=other_seed))
    assert different.token_ids != alone.token_ids


async def test_penalties_and_bias_change_the_choice(stub):
    greedy = await generate(stub, request("Hello world", max_tokens=6))
    first = greedy.token_ids[0]
    banned = await generate(stub, request("Hello world", max_tokens=6, sampling=gen_pb.SamplingParams(
        logit_bias={first: -1000.0})))
    assert banned.token_ids[0] != first
    forced = await generate(stub, request("Hello world", max_tokens=3, sampling=gen_pb.SamplingParams(
        logit_bias={42: 1000.0})))
    assert forced.token_ids == [42, 42, 42]
    no_repeat = await generate(stub, request("Hello world", max_tokens=3, sampling=gen_pb.SamplingParams(
        logit_bias={42: 1000.0}, repetition_penalty=1e9, repetition_context_size=4)))
    assert no_repeat.token_ids[0] == 42 and no_repeat.token_ids[1] != 42


async def test_stop_string_across_token_boundaries(stub):
    full = await generate(stub, request("Once upon a time", model="sliding", max_tokens=30))
    pieces = [d.text for d in full.deltas]
    # A stop string that starts inside one token's text and ends inside a later one.
    start = len(pieces[0]) + len(pieces[1]) - 1
    stop = full.text[start : start + len(pieces[2]) + 3]
    assert len(stop) >= 3
    cut = await generate(stub, request("Once upon a time", model="sliding", max_tokens=30,
                                       stopping=gen_pb.StoppingCriteria(max_tokens=30, stop=[stop])))
    assert cut.finished.reason == gen_pb.FINISH_REASON_STOP
    assert cut.finished.stop_sequence == stop
    assert cut.text == full.text[: full.text.index(stop)]
    assert stop not in cut.text


async def test_stop_token_id_and_min_tokens(stub):
    full = await generate(stub, request("Hello world", max_tokens=10))
    target = full.token_ids[4]
    stopped = await generate(stub, request("Hello world", stopping=gen_pb.StoppingCriteria(
        max_tokens=10, stop_token_ids=[target])))
    assert stopped.finished.reason == gen_pb.FINISH_REASON_STOP
    assert stopped.finished.stop_token_id == target
    assert stopped.token_ids == full.token_ids[: full.token_ids.index(target)]
    held = await generate(stub, request("Hello world", stopping=gen_pb.StoppingCriteria(
        max_tokens=10, min_tokens=10, stop_token_ids=[target])))
    assert held.token_ids == full.token_ids


async def test_eos_ends_generation_unless_ignored(stub):
    forced_eos = gen_pb.SamplingParams(logit_bias={0: 1000.0})  # id 0 is the fixtures' eos
    ended = await generate(stub, request("Hello", max_tokens=5, sampling=forced_eos))
    assert ended.finished.reason == gen_pb.FINISH_REASON_EOS
    assert ended.token_ids == [] and ended.finished.usage.completion_tokens == 0
    ignored = await generate(stub, request("Hello", sampling=forced_eos, stopping=gen_pb.StoppingCriteria(
        max_tokens=5, ignore_eos=True)))
    assert ignored.finished.reason == gen_pb.FINISH_REASON_LENGTH and len(ignored.token_ids) == 5


async def test_logprobs_match_a_direct_softmax(stub, logprob_reference):
    out = await generate(stub, request("Hello world", max_tokens=4, logprobs=True, top_logprobs=5))
    assert all(len(d.logprobs) == len(d.token_ids) for d in out.deltas)
    first = out.deltas[0].logprobs[0]
    assert first.token_id == logprob_reference[0][0] == out.token_ids[0]
    assert math.isclose(first.logprob, logprob_reference[0][1], abs_tol=1e-4)
    assert [t.token_id for t in first.top_logprobs] == [i for i, _ in logprob_reference]
    for top, (_, ref) in zip(first.top_logprobs, logprob_reference):
        assert math.isclose(top.logprob, ref, abs_tol=1e-4)
    for delta in out.deltas:
        lp = delta.logprobs[0]
        values = [t.logprob for t in lp.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert sum(math.exp(v) for v in values) <= 1.0 + 1e-5
        assert lp.token_id == lp.top_logprobs[0].token_id  # greedy picks the top token


async def test_utf8_text_is_never_broken(stub):
    tokens = await stub.Tokenize(pb.TokenizeRequest(model="llama", text="日本語 🎉 café"))
    # Feed the multi-byte prompt as a continuation: the output text must decode cleanly.
    out = await generate(stub, pb.GenerateRequest(model="llama", tokens=gen_pb.TokenIds(ids=tokens.token_ids),
                                                  stopping=gen_pb.StoppingCriteria(max_tokens=20)))
    assert all("\ufffd" not in d.text for d in out.deltas)
    whole = await stub.Detokenize(pb.DetokenizeRequest(model="llama", token_ids=out.token_ids))
    context = await stub.Detokenize(pb.DetokenizeRequest(model="llama",
                                                         token_ids=list(tokens.token_ids) + out.token_ids))
    assert context.text.endswith(out.text)
    assert whole.text.strip() == out.text.strip()


async def test_final_event_reports_usage_and_timings(stub):
    out = await generate(stub, request("Hello world", max_tokens=7))
    usage, timings = out.finished.usage, out.finished.timings
    prompt = await stub.Tokenize(pb.TokenizeRequest(model="llama", text="Hello world"))
    assert out.started.prompt_tokens == usage.prompt_tokens == len(prompt.token_ids)
    assert usage.completion_tokens == 7
    assert 0 <= timings.queue_seconds <= timings.time_to_first_token_seconds <= timings.total_seconds
    assert timings.decode_tokens_per_second > 0
