"""Structured output's engine parts on their own: a row's constraint (consume, stop,
rollback), the masks of a step (filled together, with drafts, applied as -inf) and
choice under masks (free rows untouched, seeded draws keyed as before)."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llguidance.numpy import apply_token_bitmask_inplace
from tokenizers import Tokenizer

from engine.errors import InvalidRequest
from engine.events import Delta, Finished, FinishReason
from engine.generation.core.sampling.sampler import SamplingState, choose
from engine.generation.core.sequence.delivery import Delivery, IncrementalDetokenizer
from engine.generation.core.sequence.state import SequenceState
from engine.generation.core.sequence.stopping import StopStringMatcher, TokenStopRule
from engine.generation.grammar import masks as masks_module
from engine.generation.grammar.compiler import Grammars, grammar_tokenizer
from engine.generation.grammar.formats import GrammarLimits
from engine.generation.grammar.masks import SiteMasks, bias, site_masks
from engine.requests import FormatKind, ResponseFormat, SamplingOptions

V = 640  # the fixture vocabulary
EOS = 0
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
          "required": ["name", "tags"]}


@pytest.fixture(scope="module")
def tokenizer(fixture_models):
    return Tokenizer.from_file(str(fixture_models["llama"] / "tokenizer.json"))


@pytest.fixture(scope="module")
def grammars(tokenizer):
    grammars = Grammars(grammar_tokenizer(tokenizer, V, frozenset({EOS})), GrammarLimits())
    yield grammars
    grammars.close()


async def constrain(grammars, kind, text="", options=()):
    return await grammars.constrain(ResponseFormat(kind, text, tuple(options)))


def allowed(constraint) -> set[int]:
    masks = site_masks([constraint], V)
    return set(np.flatnonzero(np.isfinite(masks_bias(masks))[0]).tolist())


def masks_bias(masks: SiteMasks) -> np.ndarray:
    return bias(masks.bits, V)


def encode(tokenizer, text) -> list[int]:
    return tokenizer.encode(text).ids


async def test_consume_until_done_then_rollback_restores_every_state(grammars, tokenizer):
    c = await constrain(grammars, FormatKind.JSON_SCHEMA, json.dumps(SCHEMA))
    ids = encode(tokenizer, '{"name": "Bo", "tags": ["a"]}')
    before = [allowed(c)]
    for token in ids:
        assert not c.done and token in before[-1]
        assert c.consume(token)
        before.append(allowed(c))
    assert c.done and c.accepting and before[-1] == {EOS} and c.ends(EOS)
    for n in (1, 3, len(ids) - 4):
        c.rollback(n)
        assert allowed(c) == before[c.consumed] and not c.done
        for token in ids[c.consumed:]:
            assert c.consume(token)
        assert c.done
    c.rollback(len(ids))
    assert c.consumed == 0 and allowed(c) == before[0]
    with pytest.raises(ValueError):
        c.rollback(1)


async def test_a_refused_token_is_an_error_state(grammars, tokenizer):
    c = await constrain(grammars, FormatKind.CHOICE, options=["yes", "no"])
    first = allowed(c)
    refused = next(t for t in range(1, V) if t not in first)
    assert not c.ends(EOS)  # nothing produced yet: not complete
    assert not c.consume(refused) and c.error
    assert c.consumed == 0


async def test_masks_with_drafts_equal_masks_after_consuming_them(grammars, tokenizer):
    rows = [await constrain(grammars, FormatKind.JSON_SCHEMA, json.dumps(SCHEMA)) for _ in range(3)]
    drafts = [encode(tokenizer, '{"name": "Al'), encode(tokenizer, '{"na')]
    bad = list(drafts[1]) + [EOS, *encode(tokenizer, "x")]  # EOS is refused here: the sites after stay open
    masks = masks_bias(site_masks([rows[0], None, rows[1], rows[2]], V, [drafts[0], [], bad, []]))
    assert masks.shape == (len(drafts[0]) + 1 + 1 + len(bad) + 1 + 1, V)
    assert set(np.flatnonzero(np.isfinite(masks[-1])).tolist()) == allowed(rows[2])  # constrained, no drafts
    assert all(c.consumed == 0 for c in rows)  # filling with drafts leaves the states as they were
    expected = []
    for token in [*drafts[0], None]:
        expected.append(allowed(rows[0]))
        if token is not None:
            rows[0].consume(token)
    free = len(drafts[0]) + 1
    assert [set(np.flatnonzero(np.isfinite(m)).tolist()) for m in masks[:free]] == expected
    assert np.all(masks[free] == 0)  # the free row's site
    for i, token in enumerate(drafts[1]):
        assert set(np.flatnonzero(np.isfinite(masks[free + 1 + i])).tolist()) == allowed(rows[1])
        rows[1].consume(token)
    assert rows[1].valid_prefix(bad[len(drafts[1]):]) == 0


async def test_parallel_and_serial_fills_agree(grammars, tokenizer, monkeypatch):
    rows = [await constrain(grammars, FormatKind.JSON_SCHEMA, json.dumps(SCHEMA)) for _ in range(3)]
    for c, text in zip(rows, ['{"na', '{"name": "A', '{"name": "Al", "tags": [']):
        for token in encode(tokenizer, text):
            assert c.consume(token)
    together = {}
    for parallel in (True, False):
        monkeypatch.setattr(masks_module, "_PARALLEL", parallel)
        together[parallel] = site_masks([rows[0], None, rows[1], rows[2]], V).bits
    assert np.array_equal(together[True], together[False])
    assert len({row.tobytes() for row in together[True][[0, 2, 3]]}) == 3  # three different states


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=20, max_size=20), min_size=1, max_size=4),
       st.integers(0, 2**31))
def test_the_bias_equals_llguidance_reference_masking(rows, seed):
    bits = np.array(rows, dtype=np.int32)
    scores = np.random.default_rng(seed).normal(0, 3, (len(rows), V)).astype(np.float32)
    expected = scores.copy()
    apply_token_bitmask_inplace(expected, bits)
    got = np.array(SiteMasks(bits, V).apply(mx.array(scores)))
    assert np.array_equal(got, expected)


async def test_choice_under_masks_greedy_sampled_and_free_rows(grammars, tokenizer):
    c, d = [await constrain(grammars, FormatKind.CHOICE, options=["yes", "no", "maybe"]) for _ in range(2)]
    open_ids = allowed(c)
    scores = mx.array(np.random.default_rng(1).normal(0, 4, (3, V)).astype(np.float32))
    greedy = SamplingState(SamplingOptions(), [])
    sampled = SamplingState(SamplingOptions(temperature=1.0, seed=5), [])
    masks = site_masks([c, None, d], V)
    chosen = choose(scores, [greedy, greedy, sampled], [0, 0, 0], masks=masks).tolist()
    raw = np.array(scores)
    assert chosen[0] == max(open_ids, key=lambda t: raw[0, t])
    assert chosen[1] == int(np.argmax(raw[1]))  # the free row chooses as without masks
    assert chosen[2] in open_ids
    for step in range(50):  # draws never leave the mask, and stay keyed by (seed, step)
        token = choose(scores[2:], [sampled], [step], masks=site_masks([c], V)).item()
        assert token in open_ids
        assert token == choose(scores, [greedy, greedy, sampled], [0, 0, step], masks=masks).tolist()[2]


@pytest.mark.parametrize("kind,text,options,message", [
    (FormatKind.JSON_SCHEMA, "{not json", (), "not a JSON document"),
    (FormatKind.JSON_SCHEMA, "[1, 2]", (), "must be a JSON object"),
    (FormatKind.JSON_SCHEMA, '{"type": "objectx"}', (), "objectx"),
    (FormatKind.JSON_SCHEMA, "[" * 70 + "]" * 70, (), "must be a JSON object"),
    (FormatKind.JSON_SCHEMA, '{"a":' * 70 + "1" + "}" * 70, (), "nests deeper"),
    (FormatKind.REGEX, "a(b", (), "unclosed group"),
    (FormatKind.REGEX, "  ", (), "must not be empty"),
    (FormatKind.GRAMMAR, "start: foo", (), "foo"),
    (FormatKind.GRAMMAR, "x" * (64 * 1024 + 1), (), "the limit is 65536"),
    (FormatKind.CHOICE, "", (), "at least one option"),
    (FormatKind.CHOICE, "", ("a", ""), "non-empty"),
    (FormatKind.CHOICE, "", tuple(str(i) for i in range(1025)), "at most 1024"),
])
async def test_invalid_formats_name_their_field(grammars, kind, text, options, message):
    rejected = grammars.stats.rejected
    with pytest.raises(InvalidRequest) as err:
        await constrain(grammars, kind, text, options)
    suffix = ".options" if kind is FormatKind.CHOICE else ""
    assert err.value.field == f"response_format.{kind.value}{suffix}"
    assert message in err.value.description
    assert grammars.stats.rejected == rejected + 1


async def test_compiled_formats_are_cached_by_text_and_copied_per_row(grammars, tokenizer):
    text = json.dumps({"type": "string", "maxLength": 5})
    a = await constrain(grammars, FormatKind.JSON_SCHEMA, text)
    hits = grammars._cache.hits
    b = await constrain(grammars, FormatKind.JSON_SCHEMA, text)
    assert grammars._cache.hits == hits + 1
    assert a.matcher is not b.matcher
    assert a.consume(encode(tokenizer, '"')[0]) and b.consumed == 0  # separate states
    assert allowed(b) != allowed(a)


async def test_compile_time_is_bounded(tokenizer):
    slow = Grammars(grammar_tokenizer(tokenizer, V, frozenset({EOS})), GrammarLimits(compile_timeout_s=0.05))
    try:
        with pytest.raises(InvalidRequest) as err:
            await constrain(slow, FormatKind.REGEX, "(a{400}){400}")
        assert "longer than" in err.value.description or "too many" in err.value.description
    finally:
        slow.close()


def constrained_sequence(tokenizer, constraint, max_tokens=20):
    ids = encode(tokenizer, "Hello")
    events: list = []
    decode = lambda t: tokenizer.decode(t, skip_special_tokens=False)  # noqa: E731
    delivery = Delivery("r", "m", events.append, IncrementalDetokenizer(decode, ids), StopStringMatcher(()), 0.0)
    rule = TokenStopRule(max_tokens, 0, frozenset({EOS}), frozenset(), False)
    seq = SequenceState("r", list(ids), len(ids), len(ids) + max_tokens, rule, SamplingState(SamplingOptions(), ids),
                   delivery, constraint=constraint)
    seq.start(0)
    return seq, events


async def test_a_complete_output_stops_without_its_stop_token(grammars, tokenizer):
    out = encode(tokenizer, "maybe")
    seq, events = constrained_sequence(tokenizer, await constrain(grammars, FormatKind.CHOICE, options=["maybe"]))
    assert seq.accept(out + [EOS]) == len(out)  # done at once: EOS is never reached
    end = events[-1]
    assert isinstance(end, Finished) and end.reason is FinishReason.STOP and end.stop_token_id is None
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "maybe"
    # a complete output that may also continue: the stop token ends it, unemitted
    seq, events = constrained_sequence(tokenizer, await constrain(grammars, FormatKind.REGEX, "[a-z]+"))
    assert seq.accept(out + [EOS]) == len(out)
    assert events[-1].reason is FinishReason.STOP and seq.tokens[-1] != EOS


async def test_max_tokens_before_the_output_is_complete_is_length(grammars, tokenizer):
    seq, events = constrained_sequence(tokenizer, await constrain(grammars, FormatKind.JSON_SCHEMA,
                                                                  json.dumps(SCHEMA)), max_tokens=3)
    assert seq.accept(encode(tokenizer, '{"name": "Bo"')) == 3
    assert events[-1].reason is FinishReason.LENGTH and not seq.constraint.done
