"""Each CPU kernel against the mlx op it stands in for, over random shapes.

Elementwise kernels: within 1e-5 relative (1e-6 absolute near zero). Attention:
within 1e-5 of the largest magnitude in each output row (it sums over keys in
another order than MLX's matmuls). RMSNorm, LayerNorm and RoPE: bit-identical to
mx.fast's CPU results.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kernel_helpers import kernels_ext, product_inputs

EXAMPLES = settings(max_examples=25, deadline=None)


@pytest.fixture(scope="module")
def K():
    return kernels_ext()


def close(got: mx.array, want: mx.array, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=rtol, atol=atol)


def rows_close(got: mx.array, want: mx.array, rtol: float = 1e-5) -> None:
    g, w = np.array(got), np.array(want)
    scale = np.maximum(np.abs(w).max(axis=-1, keepdims=True), 1e-30)
    assert (np.abs(g - w) / scale).max() <= rtol, (np.abs(g - w) / scale).max()


shapes = st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple)
widths = st.integers(1, 700)


@EXAMPLES
@given(lead=shapes, n=widths, scale=st.sampled_from([0.1, 1.0, 8.0]), seed=st.integers(0, 2**16))
def test_silu_gate(K, lead, n, scale, seed):
    mx.random.seed(seed)
    g, u = mx.random.normal((*lead, n)) * scale, mx.random.normal((*lead, n))
    close(K.silu_gate(g, u), nn.silu(g) * u)
    both = mx.concatenate([g, u], axis=-1)
    close(K.silu_gate_halves(both), nn.silu(g) * u)
    close(K.silu_gate(both[..., :n], both[..., n:]), nn.silu(g) * u)  # strided views


@EXAMPLES
@given(lead=shapes, n=widths, scale=st.sampled_from([0.5, 3.0, 12.0]), seed=st.integers(0, 2**16))
def test_gelu_both_forms(K, lead, n, scale, seed):
    mx.random.seed(seed)
    x = mx.random.normal((*lead, n)) * scale
    close(K.gelu(x, False), nn.gelu(x))
    close(K.gelu(x, True), nn.gelu_approx(x))
    close(K.gelu(x.T if x.ndim == 2 else x, False), nn.gelu(x.T if x.ndim == 2 else x))


@EXAMPLES
@given(lead=shapes, n=widths, scale=st.sampled_from([0.1, 4.0, 40.0]), seed=st.integers(0, 2**16))
def test_softmax(K, lead, n, scale, seed):
    mx.random.seed(seed)
    x = mx.random.normal((*lead, n)) * scale
    close(K.softmax(x), mx.softmax(x, axis=-1, precise=True), atol=1e-7)


@EXAMPLES
@given(lead=shapes, n=st.integers(1, 900), eps=st.sampled_from([1e-6, 1e-5, 1e-12]),
       seed=st.integers(0, 2**16))
def test_norms_are_bit_identical(K, lead, n, eps, seed):
    mx.random.seed(seed)
    x, w, b = mx.random.normal((*lead, n)) * 3, mx.random.normal((n,)), mx.random.normal((n,))
    assert mx.array_equal(K.rms_norm(x, w, eps), mx.fast.rms_norm(x, w, eps)).item()
    assert mx.array_equal(K.rms_norm(x, None, eps), mx.fast.rms_norm(x, None, eps)).item()
    assert mx.array_equal(K.layer_norm(x, w, b, eps), mx.fast.layer_norm(x, w, b, eps)).item()
    assert mx.array_equal(K.layer_norm(x, None, None, eps), mx.fast.layer_norm(x, None, None, eps)).item()


def inv_freqs(dims: int, base: float) -> mx.array:
    half = dims // 2
    return mx.exp(mx.arange(0, -half, -1, dtype=mx.float32) * mx.array(math.log(base) / half, dtype=mx.float32))


@EXAMPLES
@given(B=st.integers(1, 3), H=st.integers(1, 5), T=st.integers(1, 40), D=st.sampled_from([16, 32, 64, 80, 128]),
       partial=st.booleans(), traditional=st.booleans(), scale=st.sampled_from([1.0, 0.25]),
       offset=st.integers(0, 9000), batched=st.booleans(), seed=st.integers(0, 2**16))
def test_rope_is_bit_identical(K, B, H, T, D, partial, traditional, scale, offset, batched, seed):
    mx.random.seed(seed)
    dims = D // 2 if partial else D
    x = mx.random.normal((B, T, H, D)).transpose(0, 2, 1, 3)  # the usual head view
    base = 10000.0
    offsets = mx.array([offset + 7 * b for b in range(B)], dtype=mx.int32) if batched else offset
    want = mx.fast.rope(x, dims, traditional=traditional, base=base, scale=scale, offset=offsets)
    off = offsets if batched else mx.array([offset], dtype=mx.int32)
    got = K.rope(x, dims, traditional, scale, inv_freqs(dims, base), off)
    assert mx.array_equal(got, want).item()


@EXAMPLES
@given(B=st.integers(1, 2), L=st.integers(1, 20), Hk=st.integers(1, 3), rep=st.integers(1, 3),
       D=st.sampled_from([16, 32, 64]), norms=st.booleans(), offset=st.integers(0, 500),
       seed=st.integers(0, 2**16))
def test_qkv_rope_matches_split_norm_rope(K, B, L, Hk, rep, D, norms, offset, seed):
    mx.random.seed(seed)
    Hq = Hk * rep
    qkv = mx.random.normal((B, L, (Hq + 2 * Hk) * D))
    qn, kn = (mx.random.normal((D,)), mx.random.normal((D,))) if norms else (None, None)
    inv = inv_freqs(D, 1e5)
    q, k, v = K.qkv_rope(qkv, Hq, Hk, D, D, False, 1.0, inv, mx.array([offset], dtype=mx.int32), qn, kn, 1e-6)
    parts = mx.split(qkv, [Hq * D, (Hq + Hk) * D], axis=-1)
    heads = [p.reshape(B, L, -1, D) for p in parts]
    if norms:
        heads[0], heads[1] = mx.fast.rms_norm(heads[0], qn, 1e-6), mx.fast.rms_norm(heads[1], kn, 1e-6)
    heads = [h.transpose(0, 2, 1, 3) for h in heads]
    for got, want in zip((q, k), heads[:2]):
        assert mx.array_equal(got, mx.fast.rope(want, D, traditional=False, base=1e5, scale=1.0, offset=offset)).item()
    assert mx.array_equal(v, heads[2]).item()


def causal_window_mask(L: int, S: int, window: int) -> mx.array:
    q = mx.arange(S - L, S)[:, None]
    k = mx.arange(S)[None]
    return (q >= k) & (q < k + window)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 2), Hk=st.integers(1, 3), rep=st.integers(1, 4), L=st.integers(1, 70),
       extra=st.integers(0, 120), D=st.sampled_from([8, 16, 24, 32, 64, 80, 128]),
       mode=st.sampled_from(["none", "causal", "window", "bool", "additive"]),
       in_cache=st.booleans(), flat=st.booleans(), seed=st.integers(0, 2**16))
def test_attention(K, B, Hk, rep, L, extra, D, mode, in_cache, flat, seed):
    mx.random.seed(seed)
    S, Hq, scale = L + extra, Hk * rep, D ** -0.5
    q = mx.random.normal((B, L, Hq, D)).transpose(0, 2, 1, 3)
    k, v = mx.random.normal((B, Hk, S, D)), mx.random.normal((B, Hk, S, D))
    if in_cache:  # views into a larger preallocated cache, as the KV cache hands them out
        buf_k, buf_v = mx.zeros((B, Hk, S + 37, D)), mx.zeros((B, Hk, S + 37, D))
        buf_k[:, :, :S], buf_v[:, :, :S] = k, v
        k, v = buf_k[:, :, :S], buf_v[:, :, :S]
    window = int(mx.random.randint(1, S + 1, ()).item())
    masks = {"none": (None, None, False, 0), "causal": ("causal", None, True, 0),
             "window": (causal_window_mask(L, S, window), None, True, window),
             "bool": (mx.random.uniform(shape=(B, 1, L, S)) > 0.3, "mask", False, 0),
             "additive": (mx.random.normal((1, Hq, L, S)), "mask", False, 0)}
    ref_mask, pass_mask, causal, win = masks[mode]
    if mode == "bool":  # every row keeps at least one key
        ref_mask = ref_mask | (mx.arange(S)[None, None, None] == 0)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=ref_mask)
    got = K.attention(q, k, v, scale, causal, win, ref_mask if pass_mask else None, flat, None)
    if flat:
        want = want.transpose(0, 2, 1, 3).reshape(B, L, -1)
    rows_close(got, want)


@settings(max_examples=15, deadline=None)
@given(S=st.integers(500, 3000), Hk=st.integers(1, 3), rep=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_attention_decode_splits_long_contexts(K, S, Hk, rep, seed):
    mx.random.seed(seed)
    q = mx.random.normal((1, Hk * rep, 1, 64))
    k, v = mx.random.normal((1, Hk, S, 64)) * 2, mx.random.normal((1, Hk, S, 64))
    rows_close(K.attention(q, k, v, 0.125, True, 0, None, False, None),
               mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask="causal"))


@settings(max_examples=20, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=6), heads=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_attention_over_packed_segments_equals_each_alone(K, lengths, heads, seed):
    mx.random.seed(seed)
    N, D = sum(lengths), 32
    q, k, v = (mx.random.normal((1, heads, N, D)) for _ in range(3))
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    got = K.attention(q, k, v, D ** -0.5, False, 0, None, False, mx.array(starts))
    for a, b in zip(starts[:-1], starts[1:]):
        a, b = int(a), int(b)
        want = mx.fast.scaled_dot_product_attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], scale=D ** -0.5)
        rows_close(got[:, :, a:b], want)


@settings(max_examples=40, deadline=None)
@given(M=st.integers(1, 40), N=st.integers(1, 300), K_=st.integers(1, 700), bias=st.booleans(),
       residual=st.booleans(), prologue=st.sampled_from(["none", "rms_norm", "silu_gate"]), lead=st.booleans(),
       seed=st.integers(0, 2**16))
def test_linear(K, M, N, K_, bias, residual, prologue, lead, seed):
    """Within 1e-5 of sum |x||w| (+ |bias| + |residual|) per output: another summation
    order than the BLAS's. The prologue (RMSNorm, or SiLU-gate of x's halves) is
    applied as the standalone kernels apply it."""
    mx.random.seed(seed)
    x, b, r, norm, rows = product_inputs(K, K_, N, (2, M) if lead else (M,), bias, residual, prologue, 1e-5)
    w = mx.random.normal((N, K_))
    want = rows @ w.T + (b if bias else 0) + (r if residual else 0)
    got = K.linear(x, w, b, r, norm, 1e-5, prologue == "silu_gate")
    bound = mx.abs(rows) @ mx.abs(w).T + (mx.abs(b) if bias else 0) + (mx.abs(r) if residual else 0)
    assert (np.abs(np.array(got) - np.array(want)) <= 1e-5 * np.array(bound) + 1e-30).all()


@settings(max_examples=20, deadline=None)
@given(lengths=st.lists(st.integers(1, 120), min_size=1, max_size=6), heads=st.integers(1, 3),
       D=st.sampled_from([32, 64]), seed=st.integers(0, 2**16))
def test_segment_attention_equals_each_sequence_alone(K, lengths, heads, D, seed):
    """The encoder's attention: each packed sequence against its own keys only, as MLX computes
    it for the sequence alone (any length: the 32-key panels' and 48-row blocks' tails)."""
    if not K.segment_attention_available():
        pytest.skip("the kernels were built without AVX-512 (the flash attention over segments serves)")
    mx.random.seed(seed)
    N = sum(lengths)
    q, k, v = (mx.random.normal((1, heads, N, D)) * 2 for _ in range(3))
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    got = K.segment_attention(q, k, v, D ** -0.5, mx.array(starts))
    assert got.shape == (1, N, heads * D)
    got = got.reshape(1, N, heads, D).transpose(0, 2, 1, 3)
    for a, b in zip(starts[:-1], starts[1:]):
        a, b = int(a), int(b)
        want = mx.fast.scaled_dot_product_attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], scale=D ** -0.5)
        rows_close(got[:, :, a:b], want)


def test_segment_attention_rows_do_not_depend_on_the_other_sequences(K):
    if not K.segment_attention_available():
        pytest.skip("the kernels were built without AVX-512")
    mx.random.seed(3)
    q, k, v = (mx.random.normal((1, 2, 100, 32)) for _ in range(3))
    both = K.segment_attention(q, k, v, 0.2, mx.array(np.array([0, 60, 100], dtype=np.int32)))
    alone = K.segment_attention(q[:, :, 60:], k[:, :, 60:], v[:, :, 60:], 0.2, mx.array(np.array([0, 40], np.int32)))
    np.testing.assert_array_equal(np.array(both[:, 60:]), np.array(alone))


def test_segment_attention_refuses_what_it_cannot_run(K):
    if not K.segment_attention_available():
        pytest.skip("the kernels were built without AVX-512")
    q = mx.zeros((1, 2, 10, 32))
    seg = mx.array(np.array([0, 4, 10], dtype=np.int32))
    with pytest.raises(ValueError, match="multiple of 32"):
        K.segment_attention(q, q, mx.zeros((1, 2, 10, 16)), 0.2, seg)
    for bad in ([0, 4, 9], [1, 4, 10], [0, 4, 4, 10]):
        with pytest.raises(ValueError, match="segments"):
            K.segment_attention(q, q, q, 0.2, mx.array(np.array(bad, dtype=np.int32)))
    with pytest.raises(ValueError, match="heads and tokens"):
        K.segment_attention(q, mx.zeros((1, 2, 9, 32)), q, 0.2, seg)
