"""Speculative decoding never changes the output: greedy and seeded, alone and in a
batch mixing speculating and ordinary rows, with stops landing inside accepted runs;
cancels during verification leave nothing behind; a draft model with another
tokenizer is refused at start."""

from __future__ import annotations

import asyncio
import json
import random
import shutil

import grpc
import pytest

from engine.generation.config import GenerationConfig
from engine.generation.core.speculation.draft import DraftMismatch
from engine.generation.core.speculation.ngram import NgramIndex
from engine.generation.core.speculation.policy import Acceptance, step_allowance
from engine.generation.frontend.engine import GenerationEngine
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.conftest import HAS_SMOLLM, SELF_DRAFTED, SMOLLM
from tests.helpers import generate, request
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS
from tests.test_cancellation import settled

OFF, NGRAM, DRAFT = gen_pb.SPECULATION_MODE_OFF, gen_pb.SPECULATION_MODE_NGRAM, gen_pb.SPECULATION_MODE_DRAFT


def spec(mode, k=0):
    return gen_pb.SpeculationOptions(mode=mode, num_draft_tokens=k)


async def test_a_self_drafted_model_accepts_its_drafts_and_matches_mlx_lm(stub, oracle):
    for name, prompt in ORACLE_PROMPTS.items():
        out = await generate(stub, request(prompt, model=SELF_DRAFTED, max_tokens=ORACLE_TOKENS[name],
                                           speculation=spec(DRAFT, 6)))
        assert out.token_ids == oracle["llama"][name], name
        usage = out.finished.usage
        assert usage.draft_tokens > 0 and usage.accepted_draft_tokens >= usage.draft_tokens * 0.8, name
        assert len(out.deltas) < len(out.token_ids)  # several tokens per step


async def test_a_batch_mixing_modes_matches_mlx_lm(stub, oracle):
    names = list(ORACLE_PROMPTS)
    modes = [DRAFT, OFF, NGRAM, DRAFT, OFF, DRAFT, NGRAM, DRAFT]
    results = await asyncio.gather(*(
        generate(stub, request(ORACLE_PROMPTS[n], model=SELF_DRAFTED, max_tokens=ORACLE_TOKENS[n],
                               speculation=spec(m, 4)))
        for n, m in zip(names, modes)))
    for name, mode, out in zip(names, modes, results):
        assert out.token_ids == oracle["llama"][name], name
        if mode == OFF:
            assert out.finished.usage.draft_tokens == 0


@pytest.mark.parametrize("sampling", [
    gen_pb.SamplingParams(temperature=0.9, seed=11),
    gen_pb.SamplingParams(temperature=0.7, top_p=0.9, top_k=50, seed=3, repetition_penalty=1.2),
    gen_pb.SamplingParams(temperature=1.1, min_p=0.05, seed=5, presence_penalty=0.4, frequency_penalty=0.2),
])
async def test_seeded_sampling_is_the_same_with_and_without_speculation(stub, sampling):
    prompt = ORACLE_PROMPTS["long"]
    plain = await generate(stub, request(prompt, model=SELF_DRAFTED, max_tokens=40, sampling=sampling,
                                         speculation=spec(OFF)))
    drafted = await generate(stub, request(prompt, model=SELF_DRAFTED, max_tokens=40, sampling=sampling,
                                           speculation=spec(DRAFT, 8)))
    assert drafted.token_ids == plain.token_ids
    assert drafted.finished.usage.draft_tokens > 0


async def test_stops_inside_accepted_runs_end_exactly_as_without_speculation(stub, oracle):
    reference = oracle["llama"]["long"]
    text = (await stub.Detokenize(pb.DetokenizeRequest(model="llama", token_ids=reference))).text
    cases = [
        gen_pb.StoppingCriteria(max_tokens=13),
        gen_pb.StoppingCriteria(max_tokens=40, stop_token_ids=[reference[9]]),
        gen_pb.StoppingCriteria(max_tokens=40, stop=[text[len(text) // 2 : len(text) // 2 + 3]]),
        gen_pb.StoppingCriteria(max_tokens=40, min_tokens=12, stop_token_ids=[reference[3], reference[14]]),
    ]
    for stopping in cases:
        base = pb.GenerateRequest(model=SELF_DRAFTED, text=ORACLE_PROMPTS["long"], stopping=stopping)
        plain = pb.GenerateRequest(speculation=spec(OFF))
        plain.MergeFrom(base)
        drafted = pb.GenerateRequest(speculation=spec(DRAFT, 8))
        drafted.MergeFrom(base)
        a, b = await generate(stub, plain), await generate(stub, drafted)
        assert (b.token_ids, b.text, b.finished.reason, b.finished.stop_sequence) == \
               (a.token_ids, a.text, a.finished.reason, a.finished.stop_sequence), stopping
        assert b.finished.usage.completion_tokens == a.finished.usage.completion_tokens


async def test_logprobs_are_the_same_with_and_without_speculation(stub):
    kw = dict(model=SELF_DRAFTED, max_tokens=12, top_logprobs=3)
    a = await generate(stub, request(ORACLE_PROMPTS["medium"], speculation=spec(OFF), **kw))
    b = await generate(stub, request(ORACLE_PROMPTS["medium"], speculation=spec(DRAFT, 6), **kw))
    lps = lambda out: [(lp.token_id, [t.token_id for t in lp.top_logprobs])  # noqa: E731
                       for d in out.deltas for lp in d.logprobs]
    assert lps(a) == lps(b) and len(lps(a)) == 12
    values = lambda out: [lp.logprob for d in out.deltas for lp in d.logprobs]  # noqa: E731
    assert max(abs(x - y) for x, y in zip(values(a), values(b))) < 1e-3


async def test_cancels_during_verification_leave_nothing_behind(stub, server):
    rng = random.Random(3)

    async def one(i):
        call = stub.Generate(request(ORACLE_PROMPTS["long"], model=SELF_DRAFTED, max_tokens=200,
                                     request_id=f"spec-cancel-{i}", speculation=spec(DRAFT, 8)))
        await asyncio.sleep(rng.random() * 0.3)
        if rng.random() < 0.5:
            call.cancel()
        else:
            await stub.Cancel(pb.CancelRequest(request_id=f"spec-cancel-{i}"))
        try:
            events = [m async for m in call]
            assert events[-1].finished.reason in (gen_pb.FINISH_REASON_CANCELLED, gen_pb.FINISH_REASON_LENGTH)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.CANCELLED
        except asyncio.CancelledError:  # the call was dropped on our side
            pass

    for wave in range(4):
        await asyncio.gather(*(one(wave * 8 + i) for i in range(8)))
    await settled(server, SELF_DRAFTED)


async def test_capabilities_say_what_speculation_does(stub):
    info = {m.name: m for m in (await stub.ListModels(pb.ListModelsRequest())).models}
    drafted = info[SELF_DRAFTED].capabilities.speculation
    assert set(drafted.modes) == {OFF, NGRAM, DRAFT} and drafted.draft_model and drafted.logprobs
    assert drafted.default_mode == NGRAM
    assert set(info["llama"].capabilities.speculation.modes) == {OFF, NGRAM}
    for kind in ("sliding", "lfm2"):  # caches that cannot roll back
        assert list(info[kind].capabilities.speculation.modes) == []


async def test_draft_mode_without_a_draft_model_is_refused(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request("Hello", model="llama", speculation=spec(DRAFT)))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request("Hello", model="llama", speculation=spec(NGRAM, 9)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_draft_model_with_another_tokenizer_is_refused_at_start(fixture_models, tmp_path):
    other = tmp_path / "other-tokenizer"
    shutil.copytree(fixture_models["llama"], other)
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    a, b = list(vocab)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    engine = GenerationEngine(str(fixture_models["llama"]), name="refused",
                              config=GenerationConfig(draft_model=str(other)))
    with pytest.raises(DraftMismatch, match="does not share the tokenizer"):
        await engine.start()
    await engine.close()


@pytest.mark.skipif(not HAS_SMOLLM, reason="the embedded SmolLM2 is not installed")
async def test_prompt_lookup_on_a_real_model_copies_fast_and_changes_nothing(stub):
    passage = ("The lighthouse keeper climbed the narrow stairs every evening at dusk, lit the great "
               "lamp, and wrote the names of the ships that passed in a worn leather book.")
    chat = gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(
        role="user", content=f"Repeat this text exactly, word for word:\n\n{passage}")])
    outs = [await generate(stub, pb.GenerateRequest(model=SMOLLM, chat=chat, speculation=spec(mode, 6),
                                                    stopping=gen_pb.StoppingCriteria(max_tokens=48)))
            for mode in (OFF, NGRAM)]
    assert outs[1].token_ids == outs[0].token_ids
    usage = outs[1].finished.usage
    assert usage.accepted_draft_tokens >= 10, usage


def test_prompt_lookup_proposes_the_latest_continuation():
    index = NgramIndex(2, 3)
    tokens = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert index.propose(tokens, 3) == [7, 8, 1]  # the latest earlier "1 2 3" was followed by 7 8
    assert index.propose(tokens + [7], 2) == [8, 1]
    assert index.propose([5, 6, 7], 3) == [] and index.propose(tokens, 0) == []


def test_acceptance_pauses_a_failing_proposer_and_the_batch_shares_a_budget():
    record = Acceptance(max_drafts=4)
    assert record.wanted() >= 1
    for _ in range(4):
        record.record(4, 0)
    pause = record.pause
    assert pause >= 8  # the pause grows with every failure in a row
    assert [record.wanted() for _ in range(pause)] == [0] * pause and record.wanted() >= 1
    record.record(4, 4)
    assert record.wanted() >= 2 and record.proposed == 20 and record.accepted == 4
    assert [step_allowance(rows, 16) for rows in (1, 2, 4, 8, 16)] == [15, 7, 3, 1, 0]
    assert [step_allowance(rows, 16, max_rows=1) for rows in (1, 2, 8)] == [15, 0, 0]
    assert [step_allowance(rows, 16, max_rows=4) for rows in (1, 4, 5)] == [15, 3, 0]
