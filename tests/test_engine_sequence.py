"""A sequence on its own: runs of chosen tokens, every way it can stop, what the
client receives; the stop-string matcher and the incremental detokenizer."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from engine.events import Delta, Finished, FinishReason, Started
from engine.generation.core.sampling.sampler import SamplingState
from engine.generation.core.sequence.delivery import Delivery, IncrementalDetokenizer
from engine.generation.core.sequence.state import SequenceState, Status
from engine.generation.core.sequence.stopping import StopStringMatcher, TokenStopRule
from engine.requests import SamplingOptions

EOS = 0


@pytest.fixture(scope="module")
def tokenizer(fixture_models):
    return Tokenizer.from_file(str(fixture_models["llama"] / "tokenizer.json"))


def make(tokenizer, prompt="Hello", *, max_tokens=20, min_tokens=0, stop=(), stop_ids=(), ignore_eos=False):
    ids = tokenizer.encode(prompt).ids
    events: list = []
    decode = lambda t: tokenizer.decode(t, skip_special_tokens=False)  # noqa: E731
    delivery = Delivery("r1", "m", events.append, IncrementalDetokenizer(decode, ids), StopStringMatcher(stop),
                        time.perf_counter())
    rule = TokenStopRule(max_tokens, min_tokens, frozenset({EOS}), frozenset(stop_ids), ignore_eos)
    seq = SequenceState("r1", list(ids), len(ids), len(ids) + max_tokens, rule, SamplingState(SamplingOptions(), ids),
                   delivery)
    seq.start(0)
    return seq, events


def text_of(events) -> str:
    return "".join(e.text for e in events if isinstance(e, Delta))


def finished(events) -> Finished:
    assert isinstance(events[-1], Finished) and sum(isinstance(e, Finished) for e in events) == 1
    return events[-1]


def ids_of(tokenizer, text):
    return tokenizer.encode(text).ids


def test_a_run_is_one_delta_and_positions_follow(tokenizer):
    seq, events = make(tokenizer)
    run = ids_of(tokenizer, " the quick fox")
    assert isinstance(events[0], Started) and events[0].prompt_tokens == seq.prompt_len
    assert seq.pending == seq.tokens  # nothing computed yet
    seq.computed = seq.prompt_len
    assert seq.accept(run) == len(run)
    deltas = [e for e in events if isinstance(e, Delta)]
    assert len(deltas) == 1 and list(deltas[0].token_ids) == run
    assert deltas[0].text == " the quick fox"
    assert seq.tokens[seq.prompt_len:] == run and seq.step == len(run)
    assert seq.pending == run and not seq.finished


@pytest.mark.parametrize(("stop_ids", "reason"), [((), FinishReason.EOS), ((7,), FinishReason.STOP)])
def test_an_end_token_inside_a_run_ends_it_unemitted(tokenizer, stop_ids, reason):
    seq, events = make(tokenizer, stop_ids=stop_ids)
    end = stop_ids[0] if stop_ids else EOS
    run = ids_of(tokenizer, " boats") + [end] + ids_of(tokenizer, " gulls")
    kept = len(ids_of(tokenizer, " boats"))
    assert seq.accept(run) == kept
    assert seq.num_output == kept and seq.status is Status.FINISHED
    done = finished(events)
    assert done.reason is reason and done.usage.completion_tokens == kept
    assert done.stop_token_id == (end if stop_ids else None)
    assert text_of(events) == " boats"


def test_min_tokens_holds_end_tokens_back(tokenizer):
    seq, events = make(tokenizer, min_tokens=2, stop_ids=(7,))
    assert seq.accept([EOS, 7, 7]) == 2  # the first two are plain tokens, the third stops
    assert finished(events).reason is FinishReason.STOP


def test_ignore_eos(tokenizer):
    seq, events = make(tokenizer, ignore_eos=True, max_tokens=3)
    assert seq.accept([EOS, EOS, EOS, EOS]) == 3
    assert finished(events).reason is FinishReason.LENGTH


def test_max_tokens_inside_a_run(tokenizer):
    seq, events = make(tokenizer, max_tokens=2)
    run = ids_of(tokenizer, " one two three four")
    assert seq.accept(run) == 2
    assert finished(events).reason is FinishReason.LENGTH and seq.num_output == 2


def test_a_stop_string_across_tokens_is_never_emitted(tokenizer):
    seq, events = make(tokenizer, stop=["fox jumps"])
    for token in ids_of(tokenizer, " the quick brown fox jumps over"):
        seq.accept([token])
        if seq.finished:
            break
    done = finished(events)
    assert done.reason is FinishReason.STOP and done.stop_sequence == "fox jumps"
    assert text_of(events) == " the quick brown "


def test_held_text_is_flushed_at_length_but_not_on_cancel(tokenizer):
    seq, events = make(tokenizer, stop=["zebra"], max_tokens=5)
    seq.accept(ids_of(tokenizer, " ze"))  # "ze" may be the start of the stop string: held back
    assert text_of(events) == " "
    seq.finish(FinishReason.CANCELLED)
    assert text_of(events) == " " and finished(events).reason is FinishReason.CANCELLED
    seq, events = make(tokenizer, stop=["zebra"], max_tokens=len(ids_of(tokenizer, " ze")))
    seq.accept(ids_of(tokenizer, " ze"))
    assert finished(events).reason is FinishReason.LENGTH
    assert text_of(events) == " ze"


def test_finish_happens_once(tokenizer):
    seq, events = make(tokenizer)
    seq.finish(FinishReason.CANCELLED)
    seq.finish(FinishReason.ERROR, error="late")
    assert finished(events).reason is FinishReason.CANCELLED


def test_stop_string_matcher_holds_back_prefixes():
    m = StopStringMatcher(["STOP", "END"])
    assert m.feed("abc ST") == ("abc ", None)
    assert m.feed("O") == ("", None)
    assert m.feed("x") == ("STOx", None)
    assert m.feed(" EN") == (" ", None)
    assert m.flush() == "EN"
    assert StopStringMatcher(["D", "END"]).feed("xxEND") == ("xx", "END")  # the earliest match wins
    assert StopStringMatcher([]).feed("anything") == ("anything", None)


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab é日😀\n")), min_size=1, max_size=30))
def test_detokenizer_streams_exactly_the_decoded_text(fixture_models, text):
    tok = Tokenizer.from_file(str(fixture_models["llama"] / "tokenizer.json"))
    prompt = tok.encode("Hi").ids
    ids = tok.encode(text).ids
    detok = IncrementalDetokenizer(lambda t: tok.decode(t), prompt)
    pieces = [detok.add(i) for i in ids] + [detok.flush()]
    assert all("\ufffd" not in p for p in pieces[:-1])
    assert "".join(pieces) == tok.decode(prompt + ids)[len(tok.decode(prompt)):]
