"""The integer-dot path of one-row quantized products (engine/kernels/csrc/int_matvec.h):
x split into three 8-bit limbs per block of 32 values meets the codes as bytes.

Oracle: x @ dequantize(w).T in float64. Bound: the float kernels' 1e-6 of
sum |x||w| plus the limbs' own 2^-21 * sum |w| * blockmax(|x|) per output. Rows and
values the path does not take (two rows, non-finite x) are the float kernel's, bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from tests.kernel_helpers import kernels_ext, limb_bound


@pytest.fixture(scope="module")
def K():
    ext = kernels_ext()
    if not ext.int_matvec():
        pytest.skip("this build has no integer-dot path (AVX-512 VNNI), or MLX_GRPC_INT_MATVEC=off")
    return ext


def _weights(N: int, K_: int, group: int, seed: int, half: bool, bits: int = 4):
    mx.random.seed(seed)
    wq, scales, biases = mx.quantize(mx.random.normal((N, K_)) * 0.05, group, bits)
    if half:
        scales, biases = scales.astype(mx.float16), biases.astype(mx.float16)
    deq = mx.dequantize(wq, scales.astype(mx.float32), biases.astype(mx.float32), group, bits)
    return wq, scales, biases, deq


def _within_bound(got: mx.array, x: mx.array, deq: mx.array) -> float:
    want = np.array(x, dtype=np.float64) @ np.array(deq, dtype=np.float64).T
    allowed = 1e-6 * (np.abs(np.array(x, np.float64)) @ np.abs(np.array(deq, np.float64)).T)
    allowed += 2.0 ** -21 * limb_bound(x, deq)
    err = np.abs(np.array(got, np.float64) - want)
    assert (err <= allowed).all(), (err / allowed).max()
    return float((err / allowed).max())


def _float_kernel_row(K, x, *quant):
    """The float kernel's product of x's one row: the first of two (the integer path takes one)."""
    return K.quantized_matmul(mx.concatenate([x, x]), *quant)[:1]


# With 4 bits K = 576 and 160 end in a partial chunk of codes (its bytes read under a mask);
# with 5, 6 and 8 bits 160 does, and a group of 128 spans two chunks.
@pytest.mark.parametrize("N,K_", [(577, 576), (96, 1536), (5, 160), (64, 4096)])
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("bits", [4, 5, 6, 8])
def test_one_row_within_the_limbs_bound_of_float64(K, N, K_, group, half, bits):
    if K_ % group:
        pytest.skip("the group does not divide K")
    if bits not in K.int_matvec():
        pytest.skip(f"this build's integer path does not take {bits}-bit codes")
    wq, scales, biases, deq = _weights(N, K_, group, N + K_ + group, half, bits)
    x = mx.random.normal((1, K_)) * mx.exp(mx.random.normal((1, K_)))  # magnitudes spread within blocks
    got = K.quantized_matmul(x, wq, scales, biases, group, bits)
    _within_bound(got, x, deq)
    assert not mx.array_equal(got, _float_kernel_row(K, x, wq, scales, biases, group, bits)).item()  # the path ran


@pytest.mark.parametrize("bits", [4, 8])
def test_largest_codes_and_limbs_stay_inside_32_bits(K, bits):
    """Codes at their largest (255, or 15) against values whose limbs all round to +-127: a
    chunk's combined lane sum is then at its largest (4 * 255 * 127 * (2^14 + 2^7 + 1) < 2^31),
    and so is each 16-bit pair sum where AVX2 forms them (2 * 2 * 15 * 127 < 2^15)."""
    if bits not in K.int_matvec():
        pytest.skip(f"this build's integer path does not take {bits}-bit codes")
    wq = mx.full((4, 256 * bits // 32), 0xFFFFFFFF, dtype=mx.uint32)  # every code at its largest
    scales, biases = mx.ones((4, 8)), mx.zeros((4, 8))
    deq = mx.dequantize(wq, scales, biases, 32, bits)
    for sign in (1.0, -1.0):
        x = mx.full((1, 256), sign * (1.0 - 2.0 ** -23))  # v = x / u just under 128 in every block
        got = K.quantized_matmul(x, wq, scales, biases, 32, bits)
        _within_bound(got, x, deq)
        assert not mx.array_equal(got, _float_kernel_row(K, x, wq, scales, biases, 32, bits)).item()


def test_bias_residual_and_prologues_apply_as_on_the_float_path(K):
    wq, scales, biases, deq = _weights(200, 576, 32, 7, True)
    x = mx.random.normal((1, 1, 2 * 576))
    bias, residual, norm = mx.random.normal((200,)), mx.random.normal((1, 1, 200)), mx.random.normal((576,))
    gated = x[..., :576] * mx.sigmoid(x[..., :576]) * x[..., 576:]
    got = K.quantized_matmul(x, wq, scales, biases, 32, 4, bias, residual, None, 0.0, True)
    _within_bound((got - bias - residual).reshape(1, 200), gated.reshape(1, 576), deq)
    y = x[..., :576]
    got = K.quantized_matmul(y, wq, scales, biases, 32, 4, None, None, norm, 1e-5)
    _within_bound(got.reshape(1, 200), mx.fast.rms_norm(y, norm, 1e-5).reshape(1, 576), deq)


def test_blocks_of_zeros_outliers_and_tiny_values(K):
    wq, scales, biases, deq = _weights(64, 256, 64, 3, False)
    x = np.zeros((1, 256), np.float32)
    x[0, 32:64] = np.random.default_rng(0).normal(size=32) * 1e-30  # tiny, their own limb scale
    x[0, 64:96] = 1e-3
    x[0, 70] = 3e4  # one outlier sets its block's scale
    x[0, 128:] = np.random.default_rng(1).normal(size=128)
    ratio = _within_bound(K.quantized_matmul(mx.array(x), wq, scales, biases, 64, 4), mx.array(x), deq)
    assert ratio <= 1.0


def test_non_finite_inputs_take_the_float_path(K):
    wq, scales, biases, _ = _weights(32, 128, 32, 5, False)
    for bad in (np.inf, -np.inf, np.nan):
        x = np.random.default_rng(2).normal(size=(1, 128)).astype(np.float32)
        x[0, 17] = bad
        got = K.quantized_matmul(mx.array(x), wq, scales, biases, 32, 4)
        want = _float_kernel_row(K, mx.array(x), wq, scales, biases, 32, 4)
        np.testing.assert_array_equal(np.array(got), np.array(want))


def test_turned_off_by_the_environment():
    kernels_ext()  # skips where the kernels are off altogether
    code = ("import engine, mlx.core as mx\n"
            "from engine.kernels import ext\n"
            "mx.random.seed(0)\n"
            "wq, s, b = mx.quantize(mx.random.normal((64, 256)), 32, 4)\n"
            "x = mx.random.normal((1, 256))\n"
            "one = ext().quantized_matmul(x, wq, s, b, 32, 4)\n"
            "two = ext().quantized_matmul(mx.concatenate([x, x]), wq, s, b, 32, 4)[:1]\n"
            "print(len(ext().int_matvec()), mx.array_equal(one, two).item())\n")
    env = {**os.environ, "MLX_GRPC_INT_MATVEC": "off"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "True"]
