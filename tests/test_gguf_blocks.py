"""GGML blocks as MLX affine groups (engine.loading.gguf_blocks): MLX's own
dequantization of the result equals ``gguf``'s dequantization of the blocks for
every exact type (held in as many bits as the file's codes; 5-bit ones multiply as
their float values), Q6_K's re-quantization stays within 1/510 of each group's range,
and other types are refused by name."""

from __future__ import annotations

import engine  # noqa: F401  - BLAS before mlx
import gguf
import mlx.core as mx
import numpy as np
import pytest

from engine.loading.gguf_blocks import UnsupportedTensorType, supported_types, to_affine
from tests.gguf_quantizers import quantize, random_blocks
from tests.kernel_helpers import kernels_ext

Q = gguf.GGMLQuantizationType
EXACT = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K]
BITS = {Q.Q4_0: 4, Q.Q4_1: 4, Q.Q4_K: 4, Q.Q5_0: 5, Q.Q5_1: 5, Q.Q5_K: 5, Q.Q8_0: 8}  # held in the file's own width


def weights(rows: int = 48, cols: int = 512) -> np.ndarray:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    w[3] *= 40.0  # an outlier row
    w[5, :32] = 0.25  # a constant group
    w[6] = np.abs(w[6])  # a row without negative values
    return w


def dequantized(affine) -> np.ndarray:
    return np.array(mx.dequantize(mx.array(affine.weight), mx.array(affine.scales), mx.array(affine.biases),
                                  group_size=affine.group_size, bits=affine.bits))


@pytest.mark.parametrize("qtype", EXACT, ids=lambda q: q.name)
def test_exact_types_dequantize_to_ggufs_own_values(qtype):
    w = weights()
    raw = quantize(w, qtype)
    want = gguf.quants.dequantize(raw, qtype).reshape(w.shape)
    affine = to_affine(raw, qtype, *w.shape)
    assert affine.exact and affine.bits == BITS[qtype]
    got = dequantized(affine)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()
    assert np.abs(want - w).max() < 0.2 * np.abs(w).max()  # the blocks really encode the weights


@pytest.mark.parametrize("qtype", [Q.Q5_0, Q.Q5_1, Q.Q5_K], ids=lambda q: q.name)
def test_five_bit_types_are_held_in_five_bits_and_multiply_as_their_float_values(qtype):
    from engine import kernels

    w = weights()
    raw = quantize(w, qtype)
    values = gguf.quants.dequantize(raw, qtype).reshape(w.shape).astype(np.float64)
    affine = to_affine(raw, qtype, *w.shape)
    assert affine.bits == 5 and affine.weight.nbytes == w.size * 5 // 8
    x = np.random.default_rng(3).standard_normal((3, w.shape[1])).astype(np.float32)
    want = x.astype(np.float64) @ values.T
    bound = np.abs(x) @ np.abs(values).T
    parts = [mx.array(affine.weight), mx.array(affine.scales), mx.array(affine.biases)]
    products = {"mlx": mx.quantized_matmul(mx.array(x), *parts, transpose=True, group_size=32, bits=5)}
    if not kernels.turned_off():
        products["kernels"] = kernels_ext().quantized_matmul(mx.array(x), *parts, 32, 5)
    for name, got in products.items():
        err = np.abs(np.array(got) - want)
        assert (err <= 1e-5 * bound).all(), (name, (err / bound).max())


REQUANTIZED = [Q.Q6_K, Q.Q2_K, Q.Q3_K, Q.IQ1_S, Q.IQ1_M, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S,
               Q.IQ4_NL, Q.IQ4_XS, Q.TQ1_0, Q.TQ2_0, Q.MXFP4, Q.NVFP4]


def test_q6_k_blocks_of_real_weights_are_requantized_within_a_510th_of_each_groups_range():
    w = weights()
    raw = quantize(w, Q.Q6_K)
    want = gguf.quants.dequantize(raw, Q.Q6_K).reshape(w.shape)
    affine = to_affine(raw, Q.Q6_K, *w.shape)
    assert not affine.exact and affine.bits == 8
    within_a_510th(affine, want)


@pytest.mark.parametrize("qtype", REQUANTIZED, ids=lambda q: q.name)
def test_other_types_are_requantized_within_a_510th_of_each_groups_range(qtype):
    raw = random_blocks(qtype)
    want = gguf.quants.dequantize(raw.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1]), qtype).reshape(raw.shape[0], 256)
    affine = to_affine(raw, qtype, *want.shape)
    assert not affine.exact and affine.bits == 8 and qtype.name in supported_types()
    within_a_510th(affine, want)


def within_a_510th(affine, want: np.ndarray) -> None:
    groups = want.reshape(want.shape[0], -1, 32)
    span = (groups.max(-1) - groups.min(-1))[..., None]
    err = np.abs(dequantized(affine).reshape(groups.shape) - groups)
    assert (err <= span / 510 * (1 + 1e-4) + 1e-7 * np.abs(groups).max()).all()  # half a step, float rounding aside


def test_damaged_blocks_are_refused():
    size = gguf.GGML_QUANT_SIZES[Q.Q6_K][1]
    bad = random_blocks(Q.Q6_K, rows=2)
    bad[:, size - 2:size] = np.array([0x7C00], dtype=np.uint16).view(np.uint8)  # Q6_K's d: +inf
    with pytest.raises(UnsupportedTensorType, match="non-finite"):
        to_affine(bad, Q.Q6_K, 2, 256, "blk.0.ffn_up.weight")


@pytest.mark.parametrize("qtype", [Q.Q8_1, Q.Q8_K], ids=lambda q: q.name)
def test_other_types_are_refused_by_name(qtype):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = np.zeros((4, 256 // block * size), dtype=np.uint8)
    with pytest.raises(UnsupportedTensorType, match=qtype.name):
        to_affine(raw, qtype, 4, 256, "blk.0.ffn_up.weight")
    assert qtype.name not in supported_types()
