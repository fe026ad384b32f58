"""Quantized matmuls from MLX's affine 8-, 6-, 5- and 4-bit weights against mlx's own
dequantized reference (x @ mx.dequantize(w).T).

The kernel sums each group as scale * (x . q) + bias * sum(x): the same value in
another rounding order. Measured on this machine: at most ~3e-7 of sum |x||w| per
output (~1e-6 of the row's largest output), while quantizing itself moves outputs by
~1e-3 (8 bits) to ~2e-2 (4 bits) of the same scale. The bound asserted, 1e-6 of
sum |x||w|, is three orders of magnitude inside the quantization's own error.

One-row products on the integer-dot path (int_matvec.h) also carry x's limb
rounding: each value within 2^-21 of its block of 32's largest, so the bound adds
2^-21 * sum |w| * blockmax(|x|) for them (tests/test_kernels_int_matvec.py).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kernel_helpers import kernels_ext, limb_bound, product_inputs


@pytest.fixture(scope="module")
def K():
    return kernels_ext()


def quantized(N: int, K_: int, group: int, bits: int, seed: int):
    mx.random.seed(seed)
    w = mx.random.normal((N, K_)) * 0.05
    return w, *mx.quantize(w, group, bits)


def within_quantization_tolerance(got: mx.array, x: mx.array, deq: mx.array, extra=0.0, bits: int = 0) -> None:
    """``got`` less ``extra`` (a bias and residual the kernel added) against x @ deq.T: adding
    ``extra`` in float32 and taking it off again round by up to an ulp of |extra| each."""
    want = x @ deq.T
    allowed = 1e-6 * np.array(mx.abs(x) @ mx.abs(deq).T)
    if bits in kernels_ext().int_matvec() and x.shape[0] == 1:
        allowed = allowed + 2.0 ** -21 * limb_bound(x, deq)
    err = np.abs(np.array(got - extra) - np.array(want))
    slack = 2 * np.finfo(np.float32).eps * np.abs(np.array(extra))
    assert (err <= allowed + slack + 1e-30).all(), (err / np.maximum(allowed, 1e-30)).max()


@settings(max_examples=40, deadline=None)
@given(M=st.integers(1, 12), N=st.integers(1, 300), groups=st.integers(1, 12), group=st.sampled_from([32, 64, 128]),
       bits=st.sampled_from([4, 5, 6, 8]), lead=st.booleans(), seed=st.integers(0, 2**16))
def test_quantized_matmul_and_dequantize(K, M, N, groups, group, bits, lead, seed):
    w, wq, scales, biases = quantized(N, groups * group, group, bits, seed)
    deq = mx.dequantize(wq, scales, biases, group, bits)
    assert mx.array_equal(K.dequantize(wq, scales, biases, group, bits), deq).item()
    x = mx.random.normal((2, M, groups * group) if lead else (M, groups * group))
    got = K.quantized_matmul(x, wq, scales, biases, group, bits)
    assert got.shape == (*x.shape[:-1], N)
    within_quantization_tolerance(got.reshape(-1, N), x.reshape(-1, groups * group), deq, bits=bits)


@settings(max_examples=30, deadline=None)
@given(M=st.integers(1, 20), groups=st.integers(1, 6), bits=st.sampled_from([4, 5, 6, 8]), bias=st.booleans(),
       residual=st.booleans(), prologue=st.sampled_from(["rms_norm", "silu_gate", "none"]),
       seed=st.integers(0, 2**16))
def test_quantized_matmul_with_prologue_bias_and_residual(K, M, groups, bits, bias, residual, prologue, seed):
    w, wq, scales, biases = quantized(48, groups * 64, 64, bits, seed)  # past 12 rows: tiles through the BLAS
    deq = mx.dequantize(wq, scales, biases, 64, bits)
    x, b, r, norm, rows = product_inputs(K, groups * 64, 48, (M,), bias, residual, prologue, 1e-6)
    got = K.quantized_matmul(x, wq, scales, biases, 64, bits, b, r, norm, 1e-6, prologue == "silu_gate")
    extra = (b if bias else 0) + (r if residual else 0)
    within_quantization_tolerance(got, rows, deq, extra, bits)


@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("rows", [1, 5, 12, 64, 100])  # 1: integer dots; up to 12: codes to floats; more: tiles
def test_quantized_linear_module_uses_the_kernel(K, bits, rows):
    from engine.kernels.modules import KernelLinear
    from engine.layering import install

    mx.random.seed(bits + rows)
    layer = nn.QuantizedLinear.from_linear(nn.Linear(256, 96, bias=True), group_size=64, bits=bits)
    layer.bias = mx.random.normal((96,))
    x = mx.random.normal((1, rows, 256))
    want = layer(x)
    install(layer, KernelLinear)
    deq = mx.dequantize(layer.weight, layer.scales, layer.biases, 64, bits)
    got = layer(x)
    within_quantization_tolerance(got.reshape(rows, 96), x.reshape(rows, 256), deq, layer.bias, bits)
    # and the same as mlx's own quantized matmul to the same order
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-4, atol=1e-5)


@settings(max_examples=24, deadline=None)
@given(N=st.integers(1, 600), groups=st.integers(1, 40), bits=st.sampled_from([4, 5, 6, 8]),
       rows=st.integers(2, 12), seed=st.integers(0, 2**16))
def test_a_rows_outputs_do_not_depend_on_how_many_rows_share_the_product(K, N, groups, bits, rows, seed):
    """Up to 12 rows (a batched decode step, a draft's verification) every row runs the same
    arithmetic however many share the call: each row's outputs equal, bit for bit, the same row
    computed beside one other row (and alone, where one row does not take the integer path)."""
    _, wq, scales, biases = quantized(N, groups * 32, 32, bits, seed)
    x = mx.random.normal((rows, groups * 32))
    together = np.array(K.quantized_matmul(x, wq, scales, biases, 32, bits))
    for i in range(rows):
        pair = np.array(K.quantized_matmul(x[mx.array([i, (i + 1) % rows])], wq, scales, biases, 32, bits))
        np.testing.assert_array_equal(together[i], pair[0])
        if bits not in K.int_matvec():
            alone = np.array(K.quantized_matmul(x[i:i + 1], wq, scales, biases, 32, bits))
            np.testing.assert_array_equal(together[i], alone[0])


@pytest.mark.parametrize("bits", [2, 3])
def test_widths_the_kernels_do_not_read_are_refused_and_left_to_mlx(K, bits):
    from engine.kernels import ops

    _, wq, scales, biases = quantized(8, 64, 32, bits, 0)
    with pytest.raises(ValueError, match="bits must be"):
        K.quantized_matmul(mx.zeros((1, 64)), wq, scales, biases, 32, bits)
    layer = nn.QuantizedLinear.from_linear(nn.Linear(64, 8), group_size=32, bits=bits)
    assert not ops.quantizable(layer)
    assert ops.quantizable(nn.QuantizedLinear.from_linear(nn.Linear(64, 8), group_size=32, bits=5))


@pytest.mark.parametrize("quantize", [True, False])
def test_a_layer_given_new_arrays_computes_with_them(K, quantize):
    """The kernel product a layer keeps (ops.product) follows its arrays: weights assigned
    after a call are the ones the next call multiplies by."""
    from engine.kernels import ops
    from engine.kernels.modules import KernelLinear
    from engine.layering import install

    def make(seed):
        mx.random.seed(seed)
        linear = nn.Linear(128, 48, bias=True)
        return nn.QuantizedLinear.from_linear(linear, group_size=32, bits=4) if quantize else linear

    layer, other = make(1), make(2)
    x = mx.random.normal((1, 3, 128))
    want_first, want_other = layer(x), other(x)
    install(layer, KernelLinear)
    first = layer(x)
    assert ops.product(layer) is ops.product(layer)  # kept between calls
    for name in ("weight", "scales", "biases", "bias"):
        if name in other:
            setattr(layer, name, other[name])
    second = layer(x)
    np.testing.assert_allclose(np.array(first), np.array(want_first), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(second), np.array(want_other), rtol=1e-4, atol=1e-5)
