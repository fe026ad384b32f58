"""The newer samplers against a plain reference written from llama.cpp's source
(tests/llama_samplers.py): on fixed logits (and fixed draws and state for XTC and
mirostat), the ids each sampler keeps and their probabilities equal the reference's within
1e-6, alone and chained in both orders; DRY's penalties and the bad-word bans equal a
reference written from their definitions; a batch chooses what each row would alone."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.generation.core.sampling import dry, mirostat, truncation
from engine.generation.core.sampling.sampler import SamplingState, choose, draw_uniform, xtc_uniform
from engine.generation.core.sampling.words import SamplingTokens, banned
from engine.requests import DryOptions, DynamicTemperature, MirostatOptions, SamplerOrder, SamplingOptions, XtcOptions
from tests import llama_samplers as ref

V = 96
TOL = 1e-6


def _logits(seed: int, rows: int = 1, scale: float = 2.5) -> np.ndarray:
    return (np.random.default_rng(seed).normal(0, scale, (rows, V))).astype(np.float32)


def _ours(scores: mx.array) -> list[dict[int, float]]:
    """Each row's distribution: id -> probability of the ids left finite."""
    probs = np.array(mx.softmax(scores, axis=-1))
    finite = np.isfinite(np.array(scores))
    return [{int(i): float(p[i]) for i in np.flatnonzero(f)} for p, f in zip(probs, finite)]


def _theirs(row: np.ndarray, *samplers) -> dict[int, float]:
    c = ref.Candidates.of(row)
    for sampler in samplers:
        sampler(c)
    return c.distribution()


def _same(ours: dict[int, float], theirs: dict[int, float], what: str) -> None:
    assert set(ours) == set(theirs), f"{what}: kept {sorted(ours)} != {sorted(theirs)}"
    assert max(abs(ours[i] - theirs[i]) for i in theirs) < TOL, what


def _opts(**kw) -> SamplingOptions:
    return SamplingOptions(temperature=kw.pop("temperature", 1.0), **kw)


def _ref_temperature(c: ref.Candidates, o: SamplingOptions) -> None:
    dyn = o.dynamic_temperature
    ref.temp_ext(c, o.temperature, dyn.range if dyn else 0.0, dyn.exponent if dyn else 1.0)


CASES = {  # sampler: (ours on a batch of rows, the reference on one row, parameters per row)
    "typical_p": (truncation.typical_p, lambda o: (lambda c: ref.typical(c, o.typical_p)),
                  [_opts(typical_p=p) for p in (0.2, 0.5, 0.9, 0.97, 1.0)]),
    "top_n_sigma": (truncation.top_n_sigma, lambda o: (lambda c: ref.top_n_sigma(c, o.top_n_sigma)),
                    [_opts(top_n_sigma=n) for n in (0.3, 1.0, 1.5, 2.5, 0.0)]),
    "top_k": (truncation.top_k, lambda o: (lambda c: ref.top_k(c, o.top_k)),
              [_opts(top_k=k) for k in (1, 3, 17, 0, V + 3)]),
    "top_p": (truncation.top_p, lambda o: (lambda c: ref.top_p(c, o.top_p)),
              [_opts(top_p=p) for p in (0.1, 0.5, 0.85, 0.99, 1.0)]),
    "min_p": (truncation.min_p, lambda o: (lambda c: ref.min_p(c, o.min_p)),
              [_opts(min_p=p) for p in (0.01, 0.1, 0.5, 0.9, 0.0)]),
    "temperature": (truncation.temperature, lambda o: (lambda c: _ref_temperature(c, o)),
                    [_opts(temperature=0.7), _opts(temperature=1.3, dynamic_temperature=DynamicTemperature(0.5)),
                     _opts(temperature=0.8, dynamic_temperature=DynamicTemperature(0.6, 2.0)),
                     _opts(temperature=0.4, dynamic_temperature=DynamicTemperature(1.0, 0.5)),
                     _opts(temperature=2.0, dynamic_temperature=DynamicTemperature(0.0))]),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_sampler_keeps_what_llama_cpp_keeps(name, seed):
    ours_fn, theirs_fn, options = CASES[name]
    rows = _logits(seed, len(options))
    rows[:, 5] = -np.inf  # an id a processor removed takes no part
    ours = _ours(ours_fn(mx.array(rows), options))
    for row, o, mine in zip(rows, options, ours):
        _same(mine, _theirs(row, theirs_fn(o)), f"{name} {o}")


@pytest.mark.parametrize("threshold", [0.05, 0.1, 0.2, 0.5, 0.6])
def test_xtc_cuts_the_top_choices_as_llama_cpp_with_fixed_draws(threshold):
    rows = _logits(7, 4, scale=1.2)
    rows[:, :4] += np.array([4.0, 3.6, 3.2, 2.0], dtype=np.float32)  # several ids above the thresholds
    options = [_opts(xtc=XtcOptions(probability=p, threshold=threshold)) for p in (0.5, 0.5, 1.0, 0.0)]
    chances = [0.3, 0.7, 0.99, 0.01]  # applies, does not (0.7 > 0.5), applies, never (probability 0)
    ours = _ours(truncation.xtc(mx.array(rows), options, chances))
    cut = []
    for i, (row, o, chance, mine) in enumerate(zip(rows, options, chances, ours)):
        theirs = _theirs(row, lambda c: ref.xtc(c, o.xtc.probability, o.xtc.threshold, chance))
        _same(mine, theirs, f"xtc {o.xtc} at {chance}")
        if len(theirs) < V:
            cut.append(i)
    assert set(cut) <= {0, 2} and (len(cut) == 2 if threshold <= 0.1 else True)
    assert not cut or threshold <= 0.5


def test_xtc_draws_a_stream_of_their_own():
    a = [xtc_uniform(11, s) for s in range(500)]
    assert a == [xtc_uniform(11, s) for s in range(500)]
    tokens = [draw_uniform(11, s) for s in range(500)]
    assert all(0 < u < 1 for u in a) and not set(a) & set(tokens)
    assert abs(np.corrcoef(a, tokens)[0, 1]) < 0.15 and abs(np.mean(a) - 0.5) < 0.05


ORDERED = [
    _opts(temperature=0.8, top_k=40, top_p=0.9, min_p=0.02, typical_p=0.95, top_n_sigma=2.0,
          xtc=XtcOptions(0.5, 0.1), dynamic_temperature=DynamicTemperature(0.3, 1.5)),
    _opts(temperature=1.2, top_n_sigma=1.5, typical_p=0.8, xtc=XtcOptions(1.0, 0.05)),
    _opts(temperature=0.6, top_k=25, min_p=0.05, xtc=XtcOptions(0.9, 0.15)),
    _opts(temperature=1.0, top_p=0.7, typical_p=0.6),
    _opts(temperature=1.5, top_k=10, dynamic_temperature=DynamicTemperature(1.0, 1.0)),
]


@pytest.mark.parametrize("order", [SamplerOrder.LLAMA_CPP, SamplerOrder.DEFAULT])
@pytest.mark.parametrize("seed", [3, 4])
def test_the_chains_match_the_reference_in_both_orders(order, seed):
    options = [SamplingOptions(**{**o.__dict__, "order": order}) for o in ORDERED]
    rows = _logits(seed, len(options), scale=1.5)
    rows[:, :3] += np.array([3.0, 2.7, 2.2], dtype=np.float32)
    chances = [0.2, 0.4, 0.5, 1.0, 1.0]
    ours = _ours(truncation.truncate(mx.array(rows), options, chances))
    chain = ref.llama_chain if order is SamplerOrder.LLAMA_CPP else ref.default_chain
    for row, o, chance, mine in zip(rows, options, chances, ours):
        _same(mine, _theirs(row, lambda c: chain(c, o, chance)), f"{order} {o}")


def test_the_orders_differ_where_llama_cpp_says_they_do():
    o = _opts(temperature=3.0, min_p=0.2)  # min-p before temperature keeps fewer ids
    row = _logits(9)
    default = _ours(truncation.truncate(mx.array(row), [o], [1.0]))[0]
    llama = _ours(truncation.truncate(mx.array(row), [SamplingOptions(**{**o.__dict__,
                                                                        "order": SamplerOrder.LLAMA_CPP})], [1.0]))[0]
    assert set(llama) < set(default)


@pytest.mark.parametrize("tau,eta,mu", [(5.0, 0.1, 10.0), (3.0, 0.3, 4.2), (1.0, 1.0, 0.5), (8.0, 0.05, 2.0)])
def test_mirostat_truncates_and_updates_mu_as_llama_cpp(tau, eta, mu):
    o = _opts(temperature=0.9, mirostat=MirostatOptions(tau, eta))
    row = _logits(int(tau * 10))[0]
    scaled = truncation.temperature(mx.array(row), [o])
    kept, log2p = mirostat.truncate(scaled, [mu])
    c = ref.Candidates.of(row)
    ref.temp(c, 0.9)
    ref.mirostat_v2(c, mu)
    _same(_ours(kept)[0], dict(zip(c.ids, c.p)), f"mirostat mu={mu}")
    for chosen in c.ids[:3]:
        ours_mu = mirostat.updated_mu(mu, o.mirostat, -np.array(log2p)[0, chosen])
        assert abs(ours_mu - ref.mirostat_mu(c, mu, tau, eta, chosen)) < TOL


def test_mirostat_mu_follows_committed_tokens_in_the_engine_state():
    o = _opts(temperature=1.0, seed=5, mirostat=MirostatOptions(4.0, 0.2))
    state = SamplingState(o, [1, 2, 3])
    assert state.mu == 8.0
    rows = _logits(21, 6)
    mu = 8.0
    for step, row in enumerate(rows):
        token = choose(mx.array(row[None]), [state], [step]).item()
        c = ref.Candidates.of(row)
        ref.temp(c, 1.0)
        ref.mirostat_v2(c, mu)
        assert token in c.ids
        mu = ref.mirostat_mu(c, mu, 4.0, 0.2, token)
        state.commit(token)
        assert abs(state.mu - mu) < 1e-5
    assert mu != 8.0


def _repetitive(seed: int, n: int = 120) -> list[int]:
    rng = np.random.default_rng(seed)
    phrase = rng.integers(0, 12, 7).tolist()
    out: list[int] = []
    while len(out) < n:
        out += phrase[: rng.integers(2, 8)] if rng.random() < 0.6 else rng.integers(0, 12, 3).tolist()
    return out[:n]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("params", [(0.8, 1.75, 2, 0), (1.0, 1.1, 1, 40), (2.0, 3.0, 3, 0), (0.5, 1.0, 2, 17)])
def test_dry_penalties_match_the_definition(seed, params):
    multiplier, base, allowed, last_n = params
    tokens = _repetitive(seed)
    breakers = [[4], [7, 8], [9, 1, 2]] if seed % 2 else []
    o = DryOptions(multiplier=multiplier, base=base, allowed_length=allowed, penalty_last_n=last_n)
    ours = dry.penalties(tokens, o, dry.breakers_by_head([tuple(b) for b in breakers]))
    theirs = ref.dry(tokens, multiplier, base, allowed, last_n, breakers)
    assert set(ours) == set(theirs)
    assert all(math.isclose(ours[t], theirs[t], rel_tol=1e-12) for t in theirs)


def test_dry_example_from_llama_cpp():
    """llama.cpp's worked example: a b c c b c y a b c -> c extends "a b c" (3), b "c" (1), y "b c" (2)."""
    a, b, c, y = 1, 2, 3, 4
    o = DryOptions(multiplier=1.0, base=2.0, allowed_length=1)
    assert dry.penalties([a, b, c, c, b, c, y, a, b, c], o, {}) == {c: 4.0, y: 2.0, b: 1.0}
    context = [a, b, c, c, b, c, y, a, b, c]
    assert dry.penalties(context, o, dry.breakers_by_head([(y,)])) == {c: 4.0, b: 1.0}  # y breaks, unpenalized
    assert dry.penalties(context, o, dry.breakers_by_head([(a,)])) == {c: 2.0, y: 2.0, b: 1.0}  # cut at 2


def test_dry_searches_at_most_its_window():
    """penalty_last_n 0 searches the last MAX_WINDOW tokens, so a step's cost stays bounded
    whatever the context: a repeat that began further back is not seen."""
    a, b, c = 1, 2, 3
    o = DryOptions(multiplier=1.0, base=2.0, allowed_length=1)
    context = [a, b, c] + [7] * (dry.MAX_WINDOW - 3) + [a, b]  # "a b" repeats from beyond the window
    assert dry.penalties(context, o, {}) == {}
    assert dry.penalties(context[-dry.MAX_WINDOW + 1:], o, {}) == {}
    assert dry.penalties([a, b, c] + [7] * (dry.MAX_WINDOW - 6) + [a, b], o, {}) == {c: 2.0}  # within: seen


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=12),
       st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple), max_size=4))
def test_bad_words_ban_exactly_where_the_output_ends_with_the_rest(output, words):
    expected = {w[-1] for w in words if len(w) == 1 or (len(output) >= len(w) - 1
                                                        and output[len(output) - len(w) + 1:] == list(w[:-1]))}
    assert banned(words, output) == expected


def test_processors_hold_bad_words_allowed_ids_and_dry_with_drafts_counted():
    scores = mx.array(_logits(2))
    words = SamplingTokens(bad_words=((10, 11), (12,)))
    o = _opts(bad_words=("x",), allowed_token_ids=tuple(range(8, 40)), dry=DryOptions(multiplier=1.0))
    state = SamplingState(o, [8, 9, 10, 11, 8, 9], words)
    out = np.array(state.process(scores[0], [10]))
    assert np.isneginf(out[11]) and np.isneginf(out[12])  # "10 11" ended by the draft, "12" always
    assert np.isneginf(out[:8]).all() and np.isneginf(out[40:]).all()
    plain = np.array(state.process(scores[0]))
    assert np.isfinite(plain[11]) and np.isneginf(plain[12])
    raw = np.array(scores)[0]
    assert abs(plain[10] - (raw[10] - 1.0)) < 1e-6  # DRY: "8 9" repeats, so "10" would extend it
    assert abs(plain[9] - raw[9]) < 1e-6 and abs(out[10] - raw[10]) < 1e-6  # "8 9 10": nothing repeats "10"


NEW = st.builds(
    SamplingOptions,
    temperature=st.sampled_from([0.0, 0.5, 1.0, 1.4]),
    top_k=st.sampled_from([0, 5, 40]), top_p=st.sampled_from([1.0, 0.9]), min_p=st.sampled_from([0.0, 0.05]),
    typical_p=st.sampled_from([1.0, 0.9, 0.5]), top_n_sigma=st.sampled_from([0.0, 1.0, 2.0]),
    xtc=st.sampled_from([None, XtcOptions(0.5, 0.1), XtcOptions(1.0, 0.05)]),
    dry=st.sampled_from([None, DryOptions(multiplier=0.8)]),
    mirostat=st.sampled_from([None, None, MirostatOptions(5.0, 0.1)]),
    dynamic_temperature=st.sampled_from([None, DynamicTemperature(0.5, 1.0)]),
    order=st.sampled_from(list(SamplerOrder)),
    allowed_token_ids=st.sampled_from([(), tuple(range(0, V, 3))]),
    seed=st.integers(0, 2**63 - 1),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(NEW, min_size=1, max_size=6), st.integers(0, 10_000), st.integers(0, 2**31))
def test_a_batch_of_new_samplers_chooses_what_each_row_would_alone(opts, step, seed):
    scores = mx.array(np.random.default_rng(seed).normal(0, 3, (len(opts), V)).astype(np.float32))
    history = np.random.default_rng(seed).integers(0, V, 12).tolist()
    together_states = [SamplingState(o, history) for o in opts]
    alone_states = [SamplingState(o, history) for o in opts]
    steps = [step + i for i in range(len(opts))]
    together = choose(scores, together_states, steps).tolist()
    alone = [choose(scores[i : i + 1], [alone_states[i]], [steps[i]]).item() for i in range(len(opts))]
    assert together == alone
    for token, a, b in zip(together, together_states, alone_states):
        a.commit(token)
        b.commit(token)
        assert a.mu == b.mu


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=40), st.integers(1, 4), st.sampled_from([0, 5, 13]),
       st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3), max_size=3))
def test_dry_penalties_match_the_definition_on_small_alphabets(tokens, allowed, last_n, breakers):
    o = DryOptions(multiplier=1.5, base=1.3, allowed_length=allowed, penalty_last_n=last_n)
    ours = dry.penalties(tokens, o, dry.breakers_by_head([tuple(b) for b in breakers]))
    theirs = ref.dry(tokens, 1.5, 1.3, allowed, last_n, breakers)
    assert ours.keys() == theirs.keys() and all(math.isclose(ours[t], theirs[t]) for t in theirs)
