"""llama numerics (``numerics="llama"``): a GGUF model's quantized products computed as
llama.cpp computes them, by ggml's own CPU backend. Checked against a numpy reference of
ggml's Q8_0 activation quantizer and the Q4_0/Q8_0/Q4_1 dot products, for row-count
invariance (the K-quants: llama.cpp's batched kernels, within float rounding), and on the
embedded SmolLM2 GGUF's layers against numpy references. Weights go through
``GgmlWeights``, as the model's layers hold them: repacked by ggml where llama.cpp repacks."""

from __future__ import annotations

import gguf
import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from engine.loading.gguf_llama import GgmlLinear
from tests.gguf_quantizers import quantize
from tests.kernel_helpers import kernels_ext

Q = gguf.GGMLQuantizationType
ROW_INVARIANT = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0]
K_QUANTS = [Q.Q4_K, Q.Q5_K, Q.Q6_K]
TYPES = ROW_INVARIANT + K_QUANTS


@pytest.fixture(scope="module")
def ggml():
    kernels_ext()
    from engine.kernels import ggml as module

    module.open_backend()
    return module


def q8_0_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's quantize_row_q8_0 in numpy: per 32 values a float16 step and int8 codes."""
    blocks = x.astype(np.float32).reshape(*x.shape[:-1], -1, 32)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        inverse = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    codes = np.rint(blocks * inverse).astype(np.int32)  # round half to even, as the SIMD quantizers
    return (amax / np.float32(127)).astype(np.float16).astype(np.float64), codes


def weight_blocks(blocks: np.ndarray, qtype: Q) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 / Q8_0 weight blocks: float16 steps and signed codes per 32 values."""
    rows = blocks.shape[0]
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    raw = blocks.reshape(rows, -1, size)
    steps = raw[..., :2].copy().view(np.float16)[..., 0].astype(np.float64)
    if qtype == Q.Q8_0:
        codes = raw[..., 2:].view(np.int8).astype(np.int32)
    else:
        packed = raw[..., 2:]
        codes = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.int32) - 8
    return steps, codes


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q8_0], ids=lambda t: t.name)
def test_products_equal_the_numpy_reference_of_ggmls_quantizer_and_integer_dots(ggml, qtype):
    rng = np.random.default_rng(int(qtype))
    w = quantize(rng.standard_normal((48, 512)).astype(np.float32), qtype)
    x = (rng.standard_normal((5, 512)) * rng.uniform(0.01, 10, (5, 1))).astype(np.float32)
    x[2, :32] = 0.0  # an all-zero block: step 0, codes 0
    got = np.array(ggml.matmul(mx.array(x), mx.array(w), int(qtype)), dtype=np.float64)
    xd, xq = q8_0_reference(x)
    wd, wq = weight_blocks(w, qtype)
    sums = np.einsum("mbk,nbk->mnb", xq, wq)  # integer sums per block, exact
    terms = xd[:, None, :, 0] * wd[None] * sums
    want = terms.sum(-1)
    bound = 1e-6 * np.abs(terms).sum(-1) + 1e-30
    assert np.all(np.abs(got - want) <= bound), np.abs(got - want).max()


def _held_and_rows(ggml, qtype: Q):
    """A 64 x 512 weight as the model's layers hold it, 17 rows of x, and row 0's result alone."""
    rng = np.random.default_rng(7)
    weights = ggml.GgmlWeights(mx.array(quantize(rng.standard_normal((64, 512)).astype(np.float32), qtype)),
                               int(qtype))
    x = rng.standard_normal((17, 512)).astype(np.float32)
    return weights, x, np.array(weights(mx.array(x[:1])))[0]


@pytest.mark.parametrize("qtype", ROW_INVARIANT, ids=lambda t: t.name)
def test_a_rows_result_does_not_depend_on_how_many_rows_share_the_product(ggml, qtype):
    weights, x, alone = _held_and_rows(ggml, qtype)
    for rows in range(2, 18):
        assert np.array_equal(np.array(weights(mx.array(x[:rows])))[0], alone), rows


@pytest.mark.parametrize("qtype", K_QUANTS, ids=lambda t: t.name)
def test_k_quant_rows_sum_as_llama_cpps_batched_kernels_do(ggml, qtype):
    """ggml multiplies a K-quant batch with other kernels than one row (repacked GEMMs from 4
    rows, tiled ones from 8): the same integer sums, the float ones in another order."""
    weights, x, alone = _held_and_rows(ggml, qtype)
    for rows in range(2, 18):
        got = np.array(weights(mx.array(x[:rows])))[0]
        assert np.allclose(got, alone, rtol=1e-5, atol=1e-5 * np.abs(alone).max()), rows
        if rows < 4:
            assert np.array_equal(got, alone), rows


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_every_type_is_the_float_product_within_8_bit_activation_error(ggml, qtype):
    rng = np.random.default_rng(11)
    blocks = quantize(rng.standard_normal((32, 1024)).astype(np.float32), qtype)
    weights = gguf.quants.dequantize(blocks, qtype).reshape(32, 1024)
    x = rng.standard_normal((3, 1024)).astype(np.float32)
    got = np.array(ggml.matmul(mx.array(x)[None], mx.array(blocks), int(qtype)))[0]
    want = x.astype(np.float64) @ weights.T
    assert got.shape == (3, 32)
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()
    assert not np.allclose(got, want, rtol=1e-6, atol=1e-6)  # the activations really were quantized


def test_bad_operands_are_refused_by_name(ggml):
    w = mx.array(quantize(np.ones((4, 64), np.float32), Q.Q4_0))
    with pytest.raises(ValueError, match="columns"):
        ggml.matmul(mx.zeros((1, 96)), w, int(Q.Q4_0))
    with pytest.raises(ValueError, match="no CPU dot product"):
        ggml.matmul(mx.zeros((1, 64)), w, int(Q.Q8_1))
    with pytest.raises(ValueError, match="uint8"):
        ggml.matmul(mx.zeros((1, 64)), w.astype(mx.int32), int(Q.Q4_0))


def _round_q8(x: mx.array) -> mx.array:
    """x rounded as ggml's Q8_0/Q8_1 quantizers round it (per 32 values: a float16 step, int8 codes)."""
    blocks = x.astype(mx.float32).reshape(*x.shape[:-1], -1, 32)
    amax = mx.abs(blocks).max(axis=-1, keepdims=True)
    inverse = mx.where(amax > 0, 127.0 / mx.maximum(amax, 1e-30), 0.0)
    step = (amax / 127.0).astype(mx.float16).astype(mx.float32)
    return (step * mx.round(blocks * inverse)).reshape(x.shape)


def _q4_1_by_q8_1(layer: nn.QuantizedLinear, x: mx.array) -> np.ndarray:
    """ggml's Q4_1 x Q8_1 product in numpy from the exact layer's triplets (scale d, offset m
    per 32 weights): per block d * (codes . x codes) * x step + m * float16(x step * sum of x codes), that step
    taken before its own rounding to float16."""
    values = np.array(x, dtype=np.float32)
    steps, codes = q8_0_reference(values)  # Q8_1 rounds as Q8_0
    step32 = np.abs(values.reshape(*values.shape[:-1], -1, 32)).max(-1) / np.float32(127)  # before float16
    scaled = np.array(mx.dequantize(layer.weight, layer.scales, mx.zeros_like(layer.biases), group_size=32,
                                    bits=layer.bits), dtype=np.float64)  # d * codes
    offsets = np.array(layer.biases, dtype=np.float64)  # [N, blocks]
    scaled = scaled.reshape(scaled.shape[0], -1, 32)
    dots = np.einsum("...bk,nbk->...nb", codes * steps, scaled)
    sums = (step32 * codes.sum(-1)).astype(np.float16).astype(np.float64)  # [..., blocks]
    return mx.array((dots + np.einsum("...b,nb->...nb", sums, offsets)).sum(-1).astype(np.float32))


def test_the_embedded_ggufs_layers_compute_as_the_float_layers_on_8_bit_activations(ggml):
    """Each Q4_1 layer against a numpy reference of ggml's Q4_1 x Q8_1 dot, the tied Q8_0 head
    against the exact head fed the rounded activations; the whole model amplifies rounding
    over 30 layers, so it is checked by its answer."""
    from engine.loading.embedded import default_generation_model
    from engine.loading.model import load_generation_model

    path = default_generation_model()
    llama = load_generation_model(path, numerics="llama")
    assert llama.numerics == "llama" and llama.kernels["ggml_linear"] == 30 * 7 and llama.kernels["ggml_head"] == 1
    exact = load_generation_model(path, use_kernels=False)
    ours, theirs = dict(llama.model.named_modules()), dict(exact.model.named_modules())
    ids = mx.array([llama.tokenizer.encode("The three primary colours are red, yellow and")])
    x = exact.model.model.embed_tokens(ids)
    hidden = theirs["model.layers.3.mlp.up_proj"](x) * nn.silu(theirs["model.layers.3.mlp.gate_proj"](x))
    cases = [("model.layers.0.self_attn.q_proj", x), ("model.layers.7.self_attn.v_proj", x),
             ("model.layers.3.mlp.down_proj", hidden)]
    for name, inputs in cases:
        assert isinstance(ours[name], GgmlLinear)
        layer = theirs[name]  # Q4_1, or Q8_0 where llama.cpp's mix keeps 8 bits (exact on rounded inputs)
        got = ours[name](inputs)
        want = _q4_1_by_q8_1(layer, inputs) if layer.bits == 4 else layer(_round_q8(inputs))
        unrounded = theirs[name](inputs)
        error = float(mx.abs(got - want).max())
        assert error <= 1e-4 * float(mx.abs(want).max()), (name, error)
        assert float(mx.abs(unrounded - want).max()) > 10 * error  # the rounding is really there
    got = llama.model.model.embed_tokens.as_linear(x)  # the tied Q8_0 head
    want = exact.model.model.embed_tokens.as_linear(_round_q8(x))
    assert float(mx.abs(got - want).max()) <= 1e-5 * float(mx.abs(want).max())
    capital = mx.array([llama.tokenizer.encode("The capital of France is")])
    assert llama.model(capital)[0, -1].argmax().item() == exact.model(capital)[0, -1].argmax().item()


def test_llama_numerics_need_a_gguf_file(fixture_models):
    from engine.errors import UnsupportedModel
    from engine.loading.model import load_generation_model

    with pytest.raises(UnsupportedModel, match="GGUF"):
        load_generation_model(fixture_models["llama"], numerics="llama")
    with pytest.raises(UnsupportedModel, match="one of"):
        load_generation_model(fixture_models["llama"], numerics="fast")
