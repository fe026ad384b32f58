"""Predicted outputs: a request's prediction is proposed as drafts wherever the output
follows it, and from where the output rejoins it after substitutions, insertions and
deletions; the output never changes (greedy, seeded, with logprobs, choices, grammar,
in a mixed batch); bad predictions are refused by name."""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest

from engine.generation.core.speculation.prediction import PredictionDrafts
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.helpers import details, generate, request
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS

OFF, NGRAM, DRAFT = gen_pb.SPECULATION_MODE_OFF, gen_pb.SPECULATION_MODE_NGRAM, gen_pb.SPECULATION_MODE_DRAFT
PROMPT = ORACLE_PROMPTS["long"]


def predicted(ids=None, text=None) -> gen_pb.Prediction:
    return gen_pb.Prediction(text=text) if text is not None else gen_pb.Prediction(tokens=gen_pb.TokenIds(ids=ids))


def follow(prediction: list[int], output: list[int], k: int = 4) -> list[list[int]]:
    """What ``PredictionDrafts`` proposes after each prefix of ``output``."""
    drafts = PredictionDrafts(prediction)
    return [drafts.propose([0, 0, *output[:i]], 2, k) for i in range(len(output) + 1)]  # after a prompt


def test_drafts_follow_the_prediction_and_rejoin_it_after_each_kind_of_edit():
    p = list(range(100, 140))
    assert follow(p, p[:3], 32)[3] == p[3:19]  # 2 ** 5 tokens followed, capped at 16
    sub = p[:5] + [7] + p[6:10]  # a substitution: lost at 7, rejoined by the next predicted token
    assert follow(p, sub)[7] == [] and follow(p, sub)[8] == p[8:12]  # a one-token rejoin drafts once confirmed
    ins = p[:5] + [1, 2, 3] + p[5:8]  # an insertion: rejoined where the prediction resumes
    assert follow(p, ins)[9] == [] and follow(p, ins)[10] == p[7:11]
    dele = p[:5] + p[9:12]  # a deletion: the output jumps ahead in the prediction
    assert follow(p, dele)[6] == [] and follow(p, dele)[7] == p[11:15]
    assert follow(p, p)[-1] == []  # the prediction is used up


def test_drafts_double_with_the_tokens_followed():
    p = list(range(100, 160))
    assert [len(d) for d in follow(p, p[:6], 32)] == [4, 8, 16, 16, 16, 16, 16]


def test_a_rejoin_prefers_the_longest_match_and_the_nearest_ahead():
    p = [1, 2, 3, 9, 1, 2, 4, 9, 1, 2, 3, 5]
    out = [1, 2, 3, 9, 7, 1, 2, 3]  # after the mismatch, "1 2 3" occurs at 0 and 8; 8 is ahead
    assert follow(p, out)[-1] == [5]
    far = list(range(50)) + [999]
    out = [0, 1, 2, 777, 999]  # one token far ahead does not rejoin
    assert follow(far, out)[-1] == []


def test_an_unrelated_output_gets_no_drafts():
    rng = random.Random(3)
    p = [rng.randrange(1000, 2000) for _ in range(200)]
    out = [rng.randrange(0, 999) for _ in range(200)]
    assert all(d == [] for d in follow(p, out)[1:])


async def plain(stub, **kw):
    return await generate(stub, request(PROMPT, speculation=gen_pb.SpeculationOptions(mode=OFF), **kw))


async def test_the_output_is_the_same_with_its_own_output_as_prediction(stub, oracle):
    for name, prompt in ORACLE_PROMPTS.items():
        want = oracle["llama"][name]
        out = await generate(stub, request(prompt, max_tokens=ORACLE_TOKENS[name], prediction=predicted(want)))
        assert out.token_ids == want, name
        usage = out.finished.usage
        assert usage.accepted_prediction_tokens >= len(want) // 2, (name, usage)
        assert usage.draft_tokens >= usage.accepted_prediction_tokens + usage.rejected_prediction_tokens
        assert len(out.deltas) < len(want), name


@pytest.mark.parametrize("edit", ["substitute", "insert", "delete", "text"])
async def test_an_edited_prediction_rejoins_and_never_changes_the_output(stub, edit):
    ref = (await plain(stub, max_tokens=48)).token_ids
    cut = 20
    guess = {"substitute": ref[:cut] + [(ref[cut] + 1) % 600] + ref[cut + 1:],
             "insert": ref[:cut] + [5, 6, 7, 8] + ref[cut:],
             "delete": ref[:cut] + ref[cut + 6:],
             "text": None}[edit]
    prediction = predicted(guess) if guess is not None else predicted(text=(await stub.Detokenize(
        pb.DetokenizeRequest(model="llama", token_ids=ref))).text)
    out = await generate(stub, request(PROMPT, max_tokens=48, prediction=prediction))
    assert out.token_ids == ref
    usage = out.finished.usage
    if edit != "text":  # a re-tokenized text may differ from the ids anywhere
        assert usage.accepted_prediction_tokens > cut, usage  # drafts continued after the edit


async def test_a_wrong_prediction_changes_nothing(stub):
    ref = await plain(stub, max_tokens=32)
    rng = random.Random(7)
    out = await generate(stub, request(PROMPT, max_tokens=32, prediction=predicted(
        [rng.randrange(600) for _ in range(64)])))
    assert out.token_ids == ref.token_ids


@pytest.mark.parametrize("extra", [
    {"sampling": gen_pb.SamplingParams(temperature=0.9, seed=11)},
    {"sampling": gen_pb.SamplingParams(temperature=0.7, top_k=40, seed=5, repetition_penalty=1.2)},
    {"logprobs": True, "top_logprobs": 3},
])
async def test_seeded_and_logprob_requests_are_the_same_with_a_prediction(stub, extra):
    ref = await plain(stub, max_tokens=32, **extra)
    out = await generate(stub, request(PROMPT, max_tokens=32, prediction=predicted(ref.token_ids), **extra))
    assert out.token_ids == ref.token_ids
    if "logprobs" in extra:  # a verified position's values may differ in the last float bits
        ids = lambda o: [(lp.token_id, [t.token_id for t in lp.top_logprobs])  # noqa: E731
                         for d in o.deltas for lp in d.logprobs]
        values = lambda o: [lp.logprob for d in o.deltas for lp in d.logprobs]  # noqa: E731
        assert ids(out) == ids(ref) and max(abs(x - y) for x, y in zip(values(out), values(ref))) < 1e-3
    assert out.finished.usage.accepted_prediction_tokens > 0


async def choices(stub, req: pb.GenerateRequest) -> tuple[dict[int, list[int]], dict[int, gen_pb.Usage]]:
    ids, usage = {}, {}
    async for msg in stub.Generate(req):
        which = msg.WhichOneof("event")
        if which == "delta":
            ids.setdefault(msg.choice_index, []).extend(msg.delta.token_ids)
        elif which == "finished":
            usage[msg.choice_index] = msg.finished.usage
    return ids, usage


async def test_each_choice_follows_the_prediction_on_its_own(stub):
    kw = dict(max_tokens=32, n=3, sampling=gen_pb.SamplingParams(temperature=0.8, seed=2))
    ref, _ = await choices(stub, request(PROMPT, speculation=gen_pb.SpeculationOptions(mode=OFF), **kw))
    out, usage = await choices(stub, request(PROMPT, prediction=predicted(ref[1]), **kw))
    assert out == ref and len(out) == 3
    assert usage[1].accepted_prediction_tokens > 0


async def test_a_constrained_row_takes_only_the_prediction_its_grammar_allows(stub):
    fmt = gen_pb.ResponseFormat(regex="[a-z]{3}-[0-9]{4}-[a-z]{2}")
    ref = await plain(stub, max_tokens=24, response_format=fmt)
    guess = ref.token_ids + ref.token_ids
    out = await generate(stub, request(PROMPT, max_tokens=24, response_format=fmt, prediction=predicted(guess)))
    assert out.token_ids == ref.token_ids and out.text == ref.text


async def test_each_row_of_a_mixed_batch_equals_its_solo_output(stub):
    prompts = list(ORACLE_PROMPTS.values())[:6]
    solo = [await generate(stub, request(p, model="llama-drafted", max_tokens=28,
                                         speculation=gen_pb.SpeculationOptions(mode=OFF))) for p in prompts]
    modes = [OFF, NGRAM, DRAFT, NGRAM, DRAFT, OFF]
    reqs = [request(p, model="llama-drafted", max_tokens=28,
                    speculation=gen_pb.SpeculationOptions(mode=m) if m != OFF else None,
                    prediction=predicted(s.token_ids[::2] if i % 2 else s.token_ids) if i < 4 else None)
            for i, (p, m, s) in enumerate(zip(prompts, modes, solo))]
    mixed = await asyncio.gather(*(generate(stub, r) for r in reqs))
    for i, (a, b) in enumerate(zip(mixed, solo)):
        assert a.token_ids == b.token_ids, i
    assert all(m.finished.usage.accepted_prediction_tokens > 0 for m in mixed[:4:2])


async def test_capabilities_say_which_models_take_a_prediction(stub):
    llama = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"))).info.capabilities
    sliding = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="sliding"))).info.capabilities
    assert llama.speculation.external_tokens and not sliding.speculation.external_tokens
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request(PROMPT, model="sliding", prediction=predicted([1, 2, 3])))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize("kw,field", [
    ({"speculation": gen_pb.SpeculationOptions(mode=OFF)}, "prediction"),
    ({"prediction": predicted([1, 10 ** 6])}, "prediction.tokens.ids"),
    ({"prediction": predicted(list(range(16385)))}, "prediction.tokens.ids"),
    ({"prediction": predicted(text="word " * 20000)}, "prediction.text"),
])
async def test_bad_predictions_are_refused_by_name(stub, kw, field):
    kw.setdefault("prediction", predicted([1, 2, 3]))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request(PROMPT, **kw))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = details(err.value)["BadRequest"].field_violations
    assert [v.field for v in violations] == [field], violations
