"""Quantized layers the kernels run hold float16 scales and biases where every value is
exact in half precision: products are bit-identical to the float32 scales', the layers
and the lookups compute in float32, and layers with inexact values keep float32."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from tests.kernel_helpers import kernels_ext

F16, F32 = mx.float16, mx.float32


@pytest.fixture(scope="module")
def K():
    return kernels_ext()


def halves_exact(N: int, K_: int, bits: int, seed: int):
    """Codes with scales and biases that float16 holds exactly (as GGUF's blocks store them)."""
    mx.random.seed(seed)
    wq, scales, biases = mx.quantize(mx.random.normal((N, K_)) * 0.05, 32, bits)
    return wq, scales.astype(F16).astype(F32), biases.astype(F16).astype(F32)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("rows", [1, 3, 12])  # matvec; more rows: dequantized tiles and the BLAS
def test_half_scales_give_bit_identical_products(K, bits, rows):
    wq, scales, biases = halves_exact(96, 320, bits, bits + rows)
    x = mx.random.normal((rows, 320))
    want = K.quantized_matmul(x, wq, scales, biases, 32, bits)
    got = K.quantized_matmul(x, wq, scales.astype(F16), biases.astype(F16), 32, bits)
    assert mx.array_equal(got, want).item()
    assert mx.array_equal(K.dequantize(wq, scales.astype(F16), biases.astype(F16), 32, bits),
                          mx.dequantize(wq, scales, biases, 32, bits)).item()


def test_mixed_scale_and_bias_dtypes_are_refused(K):
    wq, scales, biases = halves_exact(8, 64, 4, 0)
    with pytest.raises(ValueError, match="float32 or float16, alike"):
        K.quantized_matmul(mx.ones((1, 64)), wq, scales.astype(F16), biases, 32, 4)


def _tiny_model(exact: bool):
    mx.random.seed(7)

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.QuantizedEmbedding.from_embedding(nn.Embedding(50, 64), group_size=32, bits=8)
            self.proj = nn.QuantizedLinear.from_linear(nn.Linear(64, 48, bias=True), group_size=32, bits=4)

    model = Tiny()
    if exact:
        for layer in (model.embed, model.proj):
            layer.scales, layer.biases = (layer.scales.astype(F16).astype(F32), layer.biases.astype(F16).astype(F32))
    mx.eval(model.parameters())
    return model


def test_compaction_keeps_every_output_and_lookup_in_float32(K):
    from engine.kernels.modules import swap_leaf_modules

    model = _tiny_model(exact=True)
    tokens = mx.array([[1, 5, 49]])
    x = mx.random.normal((1, 3, 64))
    want_embed, want_proj, want_head = model.embed(tokens), model.proj(x), model.embed.as_linear(x)
    counts = swap_leaf_modules(model)
    assert counts["float16_scales"] == 2
    assert model.proj.scales.dtype == model.embed.biases.dtype == F16
    got_embed = model.embed(tokens)
    assert got_embed.dtype == F32 and mx.array_equal(got_embed, want_embed).item()
    got_proj, got_head = model.proj(x), model.embed.as_linear(x)
    assert got_proj.dtype == got_head.dtype == F32
    np.testing.assert_allclose(np.array(got_proj), np.array(want_proj), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(got_head), np.array(want_head), rtol=1e-4, atol=1e-5)
    # MLX's own op (a fallback) with the scales it is given back in float32: the same products
    from engine.kernels.half_scales import stock_matmul

    np.testing.assert_allclose(np.array(stock_matmul(model.proj, x)), np.array(want_proj), rtol=1e-4, atol=1e-5)


def test_inexact_values_stay_float32(K):
    from engine.kernels.modules import swap_leaf_modules

    model = _tiny_model(exact=False)
    assert "float16_scales" not in swap_leaf_modules(model)
    assert model.proj.scales.dtype == model.embed.scales.dtype == F32


def test_adapters_compute_in_float32_on_a_compacted_base(K):
    from engine.adapters.fit import _dora_gain, _dtype
    from engine.kernels.modules import swap_leaf_modules

    model = _tiny_model(exact=True)
    a, b, m = mx.random.normal((64, 4)), mx.random.normal((4, 48)), mx.random.normal((48,))
    want = _dora_gain(model.proj, None, a, b, 2.0, m)
    swap_leaf_modules(model)
    assert _dtype(model.proj) == F32
    got = _dora_gain(model.proj, None, a, b, 2.0, m)
    assert got.dtype == F32 and mx.array_equal(got, want).item()
