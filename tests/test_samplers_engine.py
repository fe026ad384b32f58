"""The newer samplers through a live server on the fixture models: a seeded request
yields the same tokens alone, inside a batch of 8 unlike requests, and with speculation
asked for (n-gram, and a self-drafting model whose drafts are verified); mirostat runs
without speculation; bad words and allowed ids hold on what is generated; bad values are
INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.conftest import SELF_DRAFTED
from tests.helpers import details, generate, request
from tests.oracle import ORACLE_PROMPTS

OFF, NGRAM, DRAFT = gen_pb.SPECULATION_MODE_OFF, gen_pb.SPECULATION_MODE_NGRAM, gen_pb.SPECULATION_MODE_DRAFT
PROMPT = ORACLE_PROMPTS["long"]

SAMPLINGS = {
    "default-order": gen_pb.SamplingParams(
        temperature=0.9, seed=7, typical_p=0.9, top_n_sigma=1.5, top_k=60,
        xtc=gen_pb.XtcParams(probability=0.5, threshold=0.08),
        dynamic_temperature=gen_pb.DynamicTemperature(range=0.3)),
    "llama-order": gen_pb.SamplingParams(
        temperature=1.0, seed=3, top_k=40, top_p=0.9, min_p=0.05, typical_p=0.95,
        xtc=gen_pb.XtcParams(probability=1.0, threshold=0.05),
        sampler_order=gen_pb.SAMPLER_ORDER_LLAMA_CPP),
    "dry-and-words": gen_pb.SamplingParams(
        temperature=0.8, seed=9, dry=gen_pb.DryParams(multiplier=0.8, allowed_length=1),
        bad_words=["the", "sea"], repetition_penalty=1.1),
    "mirostat": gen_pb.SamplingParams(
        temperature=1.5, seed=5, mirostat=gen_pb.MirostatParams(tau=0.2, eta=0.1)),
}

OTHERS = [  # the batch's other rows: unlike prompts, options and lengths
    (ORACLE_PROMPTS["short"], gen_pb.SamplingParams()),
    (ORACLE_PROMPTS["medium"], gen_pb.SamplingParams(temperature=0.7, seed=1, top_p=0.8)),
    (ORACLE_PROMPTS["digits"], gen_pb.SamplingParams(temperature=1.2, seed=2, min_p=0.1, top_n_sigma=1.0)),
    (ORACLE_PROMPTS["chatty"], gen_pb.SamplingParams(temperature=0.6, seed=4, mirostat=gen_pb.MirostatParams())),
    (ORACLE_PROMPTS["unicode"], gen_pb.SamplingParams(temperature=1.0, seed=6, typical_p=0.5,
                                                      sampler_order=gen_pb.SAMPLER_ORDER_LLAMA_CPP)),
    (ORACLE_PROMPTS["one"], gen_pb.SamplingParams(temperature=0.9, seed=8, dry=gen_pb.DryParams(multiplier=2.0))),
    (ORACLE_PROMPTS["long"], gen_pb.SamplingParams(temperature=1.1, seed=10, xtc=gen_pb.XtcParams(probability=1.0))),
]


def spec(mode, k=0):
    return gen_pb.SpeculationOptions(mode=mode, num_draft_tokens=k)


@pytest.mark.parametrize("name", list(SAMPLINGS))
async def test_seeded_new_samplers_are_the_same_alone_in_a_batch_and_speculating(stub, name):
    sampling = SAMPLINGS[name]
    alone = await generate(stub, request(PROMPT, max_tokens=24, sampling=sampling, speculation=spec(OFF)))
    assert len(alone.token_ids) == 24
    batch = await asyncio.gather(
        generate(stub, request(PROMPT, max_tokens=24, sampling=sampling, speculation=spec(OFF))),
        *(generate(stub, request(p, max_tokens=10 + 3 * i, sampling=s)) for i, (p, s) in enumerate(OTHERS)))
    assert batch[0].token_ids == alone.token_ids
    ngram = await generate(stub, request(PROMPT, max_tokens=24, sampling=sampling, speculation=spec(NGRAM, 4)))
    assert ngram.token_ids == alone.token_ids
    plain = await generate(stub, request(PROMPT, model=SELF_DRAFTED, max_tokens=24, sampling=sampling,
                                         speculation=spec(OFF)))
    drafted = await generate(stub, request(PROMPT, model=SELF_DRAFTED, max_tokens=24, sampling=sampling,
                                           speculation=spec(DRAFT, 6)))
    assert drafted.token_ids == plain.token_ids == alone.token_ids
    if name == "mirostat":  # mu follows every committed token: no speculation for it
        assert ngram.finished.usage.draft_tokens == drafted.finished.usage.draft_tokens == 0
    else:  # drafts were verified with earlier drafts counted as emitted
        assert drafted.finished.usage.draft_tokens > 0


async def test_the_samplers_change_what_is_sampled(stub):
    """Each configuration samples something else than the same seed without it."""
    for name, sampling in SAMPLINGS.items():
        bare = gen_pb.SamplingParams(temperature=sampling.temperature, seed=sampling.seed)
        a = await generate(stub, request(PROMPT, max_tokens=24, sampling=sampling))
        b = await generate(stub, request(PROMPT, max_tokens=24, sampling=bare))
        assert a.token_ids != b.token_ids, name


async def _variants(stub, word: str) -> set[tuple[int, ...]]:
    texts = [word] if word.startswith(" ") else [word, " " + word]
    out = set()
    for text in texts:
        ids = (await stub.Tokenize(pb.TokenizeRequest(model="llama", text=text, add_special_tokens=False))).token_ids
        out.add(tuple(ids))
    return out


def _contains(ids: list[int], seq: tuple[int, ...]) -> bool:
    return any(tuple(ids[i : i + len(seq)]) == seq for i in range(len(ids) - len(seq) + 1))


@pytest.mark.parametrize("sampling", [gen_pb.SamplingParams(),  # greedy: the banned words were its choice
                                      gen_pb.SamplingParams(temperature=1.0, seed=12)])
async def test_bad_words_are_never_generated(stub, sampling):
    free = await generate(stub, request(PROMPT, max_tokens=32, sampling=sampling))
    ids = free.token_ids
    detok = lambda t: stub.Detokenize(pb.DetokenizeRequest(model="llama", token_ids=t))  # noqa: E731
    one, two = (await detok(ids[2:3])).text, (await detok(ids[6:8])).text
    words = [w for w in (one, two) if w.strip()]
    banned = set().union(*[await _variants(stub, w) for w in words])
    assert any(_contains(ids, seq) for seq in banned)  # the free output holds them
    sampling_banned = gen_pb.SamplingParams()
    sampling_banned.CopyFrom(sampling)
    sampling_banned.bad_words.extend(words)
    held = await generate(stub, request(PROMPT, max_tokens=32, sampling=sampling_banned))
    assert len(held.token_ids) == 32 and held.token_ids != ids
    assert not any(_contains(held.token_ids, seq) for seq in banned), (words, banned, held.token_ids)


@pytest.mark.parametrize("sampling", [gen_pb.SamplingParams(),
                                      gen_pb.SamplingParams(temperature=1.3, seed=2, top_n_sigma=3.0)])
async def test_allowed_token_ids_hold(stub, sampling):
    allowed = list(range(120, 150)) + [7, 200]
    s = gen_pb.SamplingParams()
    s.CopyFrom(sampling)
    s.allowed_token_ids.extend(allowed)
    out = await generate(stub, request(PROMPT, max_tokens=20, sampling=s, speculation=spec(NGRAM, 4)))
    assert len(out.token_ids) == 20 and set(out.token_ids) <= set(allowed)
    assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH  # end-of-sequence is not allowed


INVALID = [
    ("sampling.typical_p", gen_pb.SamplingParams(typical_p=0.0)),
    ("sampling.top_n_sigma", gen_pb.SamplingParams(top_n_sigma=-1.0)),
    ("sampling.xtc.probability", gen_pb.SamplingParams(xtc=gen_pb.XtcParams(probability=1.5))),
    ("sampling.xtc.threshold", gen_pb.SamplingParams(xtc=gen_pb.XtcParams(probability=0.5, threshold=0.0))),
    ("sampling.dry.base", gen_pb.SamplingParams(dry=gen_pb.DryParams(multiplier=1.0, base=0.5))),
    ("sampling.dry.penalty_last_n", gen_pb.SamplingParams(dry=gen_pb.DryParams(multiplier=1.0, penalty_last_n=4097))),
    ("sampling.dry.allowed_length", gen_pb.SamplingParams(dry=gen_pb.DryParams(multiplier=1.0, allowed_length=0))),
    ("sampling.dry.multiplier", gen_pb.SamplingParams(dry=gen_pb.DryParams(multiplier=float("nan")))),
    ("sampling.dry.sequence_breakers", gen_pb.SamplingParams(dry=gen_pb.DryParams(sequence_breakers=["x"] * 17))),
    ("sampling.dry.sequence_breakers", gen_pb.SamplingParams(dry=gen_pb.DryParams(sequence_breakers=["y" * 65]))),
    ("sampling.mirostat.eta", gen_pb.SamplingParams(mirostat=gen_pb.MirostatParams(eta=0.0))),
    ("sampling.mirostat.tau", gen_pb.SamplingParams(mirostat=gen_pb.MirostatParams(tau=-2.0))),
    ("sampling.dynamic_temperature.range", gen_pb.SamplingParams(
        dynamic_temperature=gen_pb.DynamicTemperature(range=float("inf")))),
    ("sampling.dynamic_temperature.exponent", gen_pb.SamplingParams(
        dynamic_temperature=gen_pb.DynamicTemperature(range=0.5, exponent=0.0))),
    ("sampling.allowed_token_ids", gen_pb.SamplingParams(allowed_token_ids=[3, 100000])),
    ("sampling.bad_words", gen_pb.SamplingParams(bad_words=["w"] * 65)),
    ("sampling.bad_words", gen_pb.SamplingParams(bad_words=["fine", " ".join(["stars tides wind"] * 8)])),
]


@pytest.mark.parametrize("field,sampling", INVALID, ids=[f"{f}-{i}" for i, (f, _) in enumerate(INVALID)])
async def test_bad_sampler_values_are_invalid_argument_naming_the_field(stub, field, sampling):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request(PROMPT, max_tokens=4, sampling=sampling))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details(err.value)["BadRequest"].field_violations] == [field]
