"""Vectorised sampling: the batch chooses exactly what each row would alone, the
masks match a plain reference, and draws follow the distribution."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine.generation.core.sampling.sampler import SamplingState, _mask, choose, draw_uniform
from engine.requests import SamplingOptions

V = 300

options = st.builds(
    SamplingOptions,
    temperature=st.sampled_from([0.0, 0.0, 0.3, 0.8, 1.0, 1.7]),
    top_p=st.sampled_from([1.0, 0.95, 0.5, 0.1]),
    top_k=st.sampled_from([0, 0, 1, 5, 40, V + 10]),
    min_p=st.sampled_from([0.0, 0.0, 0.05, 0.3]),
    repetition_penalty=st.sampled_from([1.0, 1.0, 1.3]),
    presence_penalty=st.sampled_from([0.0, 0.5]),
    frequency_penalty=st.sampled_from([0.0, 0.25]),
    logit_bias=st.sampled_from([{}, {3: 5.0, 7: -100.0}]),
    seed=st.integers(0, 2**63 - 1),
)


def _states(opts, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for o in opts:
        state = SamplingState(o, rng.integers(0, V, 8).tolist())
        for token in rng.integers(0, V, 5).tolist():
            state.commit(token)
        out.append(state)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(options, min_size=1, max_size=6), st.integers(0, 10_000), st.integers(0, 2**31))
def test_a_batch_chooses_what_each_row_would_alone(opts, step, seed):
    scores = mx.array(np.random.default_rng(seed).normal(0, 4, (len(opts), V)).astype(np.float32))
    states = _states(opts, seed)
    steps = [step + i for i in range(len(opts))]
    together = choose(scores, states, steps).tolist()
    alone = [choose(scores[i : i + 1], [states[i]], [steps[i]]).item() for i in range(len(opts))]
    assert together == alone
    for i, (token, state) in enumerate(zip(together, states)):
        if state.greedy:  # greedy rows take the argmax of their processed scores
            assert token == mx.argmax(state.process(scores[i])).item()


def _reference_allowed(row: np.ndarray, o: SamplingOptions) -> set[int] | None:
    """Ids left by temperature, top-k, min-p then top-p, written plainly (float64);
    None when a threshold falls within float32 rounding of a score (either answer is right)."""
    s = row.astype(np.float64) / o.temperature
    allowed = np.ones_like(s, dtype=bool)
    if 0 < o.top_k < len(s):
        kth = np.sort(s)[::-1][o.top_k - 1]
        allowed &= s >= kth
    if o.min_p > 0:
        gap = s - s[allowed].max() - math.log(o.min_p)
        if np.abs(gap[allowed]).min() < 1e-4:
            return None
        allowed &= gap >= 0
    if o.top_p < 1:
        p = np.where(allowed, np.exp(s - s[allowed].max()), 0.0)
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]
        if np.abs(before - o.top_p).min() < 1e-5:
            return None
        kept = int((before < o.top_p).sum())
        threshold = p[order][max(kept - 1, 0)]
        allowed &= p >= threshold
    return set(np.flatnonzero(allowed).tolist())


@settings(max_examples=80, deadline=None)
@given(st.lists(options.filter(lambda o: o.temperature > 0), min_size=1, max_size=5), st.integers(0, 2**31))
def test_masks_match_a_plain_reference(opts, seed):
    # well separated scores: no ties at any threshold
    rows = np.stack([np.random.default_rng(seed + i).permutation(V).astype(np.float32) * 0.05
                     for i in range(len(opts))])
    masked = np.array(_mask(mx.array(rows), opts))
    for row, out, o in zip(rows, masked, opts):
        expected = _reference_allowed(row, o)
        assume(expected is not None)
        assert set(np.flatnonzero(np.isfinite(out)).tolist()) == expected


def test_draws_follow_the_distribution():
    probs = np.array([0.5, 0.25, 0.15, 0.1])
    scores = np.full(V, -np.inf, dtype=np.float32)
    scores[[10, 20, 30, 40]] = np.log(probs)
    state = SamplingState(SamplingOptions(temperature=1.0, seed=1234), [])
    n = 4000
    batch = mx.array(np.tile(scores, (n, 1)))
    drawn = choose(batch, [state] * n, list(range(n))).tolist()
    counts = np.array([drawn.count(i) for i in (10, 20, 30, 40)])
    assert counts.sum() == n  # nothing outside the support
    assert np.abs(counts / n - probs).max() < 0.03


def test_seeded_draws_depend_on_seed_and_step_only():
    a = [draw_uniform(7, s) for s in range(1000)]
    assert a == [draw_uniform(7, s) for s in range(1000)]
    assert all(0.0 < u < 1.0 for u in a)
    assert len(set(a)) == 1000 and a != [draw_uniform(8, s) for s in range(1000)]
    assert abs(np.mean(a) - 0.5) < 0.03


def test_penalties_and_bias_change_greedy_choice():
    scores = mx.zeros((1, V))
    scores[0, 5] = 2.0
    scores[0, 6] = 1.9
    plain = SamplingState(SamplingOptions(), [])
    assert choose(scores, [plain], [0]).item() == 5
    repeated = SamplingState(SamplingOptions(repetition_penalty=1.5), [5])
    assert choose(scores, [repeated], [0]).item() == 6  # 2.0 / 1.5 < 1.9
    biased = SamplingState(SamplingOptions(logit_bias={9: 10.0}), [])
    assert choose(scores, [biased], [0]).item() == 9
    counted = SamplingState(SamplingOptions(presence_penalty=0.5), [])
    counted.commit(5)
    assert choose(scores, [counted], [0]).item() == 6


@pytest.mark.parametrize("top_k", [1, 2])
def test_top_k_one_is_greedy(top_k):
    scores = mx.array(np.random.default_rng(3).normal(0, 1, (4, V)).astype(np.float32))
    states = [SamplingState(SamplingOptions(temperature=1.0, top_k=top_k, seed=s), []) for s in range(4)]
    chosen = choose(scores, states, [0, 1, 2, 3]).tolist()
    top = np.argsort(-np.array(scores), axis=-1)[:, :top_k]
    assert all(c in t for c, t in zip(chosen, top.tolist()))
    if top_k == 1:
        assert chosen == np.argmax(np.array(scores), axis=-1).tolist()
