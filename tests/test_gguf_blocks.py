"""GGML blocks as MLX affine groups (engine.loading.gguf_blocks): MLX's own
dequantization of the result equals ``gguf``'s dequantization of the blocks for
every exact type, Q6_K's re-quantization stays within 1/510 of each group's range,
and other types are refused by name."""

from __future__ import annotations

import engine  # noqa: F401  - BLAS before mlx
import gguf
import mlx.core as mx
import numpy as np
import pytest

from engine.loading.gguf_blocks import UnsupportedTensorType, supported_types, to_affine
from tests.gguf_quantizers import quantize

Q = gguf.GGMLQuantizationType
EXACT = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K]


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
    assert affine.exact and affine.bits == (4 if qtype in (Q.Q4_0, Q.Q4_1, Q.Q4_K) else 8)
    got = dequantized(affine)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()
    assert np.abs(want - w).max() < 0.2 * np.abs(w).max()  # the blocks really encode the weights


def test_q6_k_is_requantized_within_a_510th_of_each_groups_range():
    w = weights()
    raw = quantize(w, Q.Q6_K)
    want = gguf.quants.dequantize(raw, Q.Q6_K).reshape(w.shape)
    affine = to_affine(raw, Q.Q6_K, *w.shape)
    assert not affine.exact and affine.bits == 8
    groups = want.reshape(w.shape[0], -1, 32)
    span = (groups.max(-1) - groups.min(-1))[..., None]
    err = np.abs(dequantized(affine).reshape(groups.shape) - groups)
    assert (err <= span / 510 * (1 + 1e-4) + 1e-7).all()  # half a step, float rounding aside


@pytest.mark.parametrize("qtype", [Q.IQ4_NL, Q.TQ1_0, Q.Q2_K], ids=lambda q: q.name)
def test_other_types_are_refused_by_name(qtype):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = np.zeros((4, 256 // block * size), dtype=np.uint8)
    with pytest.raises(UnsupportedTensorType, match=qtype.name):
        to_affine(raw, qtype, 4, 256, "blk.0.ffn_up.weight")
    assert qtype.name not in supported_types()
