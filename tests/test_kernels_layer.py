"""A fused block as one primitive (engine/kernels/whole_layer.py, csrc/layer.cpp).

The same block as separate primitives (the four products, qkv_rope_append, attention) is
the reference: every forward's logits must equal it bit for bit, for float weights, for
quantized ones and for a model whose q, k and v (and gate, up) have different layouts, as
GGUF Q4_K_M files have; one row and a left-padded batch, prefill chunks and decode steps
past the buffers' growth. A projection that is not plain, or new arrays, are followed (a
graph already built keeps the arrays it was built with); weights that do not fit the spec
are refused when the layer is made."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import mlx_lm
import pytest

from tests.kernel_helpers import kernels_ext
from tests.test_kernels_kv_append import assert_forwards_equal, labels, run_batch, run_single


@pytest.fixture(scope="module")
def K():
    return kernels_ext()


def _quantized(path, bits_of) -> nn.Module:
    """The fixture with its projections quantized as ``bits_of(path)`` says (group 32), kernels in."""
    from engine import kernels

    model, _ = mlx_lm.load(str(path))
    nn.quantize(model, class_predicate=lambda p, m: isinstance(m, nn.Linear) and "layers" in p and {
        "group_size": 32, "bits": bits_of(p)})
    mx.eval(model.parameters())
    kernels.apply_to_decoder(model, "quantized")
    return model


@pytest.fixture(scope="module")
def models(K, fixture_models):
    from engine.loading.model import load_generation_model

    def mixed(p: str) -> int:  # as a Q4_K_M file: v 8-bit, down 6-bit, the rest 5-bit; up 4-bit
        return 8 if "v_proj" in p else 6 if "down" in p else 4 if "up_proj" in p else 5

    return {
        "llama": load_generation_model(fixture_models["llama"]).model,
        "qwen3": load_generation_model(fixture_models["qwen3"]).model,
        "llama 4-bit": _quantized(fixture_models["llama"], lambda p: 4),
        "llama mixed": _quantized(fixture_models["llama"], mixed),
    }


@pytest.fixture
def separate(monkeypatch):
    """A context: inside it, fused blocks run as separate primitives."""
    from engine.kernels import whole_layer

    class Separate:
        def __enter__(self):
            monkeypatch.setattr(whole_layer, "call", lambda *args: None)

        def __exit__(self, *exc):
            monkeypatch.undo()

    return Separate()


def test_mixed_layouts_stay_separate_layers_inside_the_fused_blocks(models):
    block = models["llama mixed"].model.layers[0]
    assert sorted(k for k in block.self_attn if k.endswith("proj")) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert sorted(k for k in block.mlp if k.endswith("proj")) == ["down_proj", "gate_proj", "up_proj"]
    assert "qkv_proj" in models["llama 4-bit"].model.layers[0].self_attn


@pytest.mark.parametrize("name", ["llama", "qwen3", "llama 4-bit", "llama mixed"])
def test_a_step_is_one_primitive_per_layer(models, name):
    model = models[name]
    cache = mlx_lm.models.cache.make_prompt_cache(model)
    mx.eval(model(mx.array([[5, 6, 7, 8]]), cache=cache))
    out = model(mx.array([[9]]), cache=cache)
    got = labels(out)
    mx.eval(out)
    assert got["KernelDecoderLayer"] == len(model.layers), got
    assert not {"KernelQkvRope", "KernelAttention", "KernelQuantizedMatmul"} & set(got), got


@pytest.mark.parametrize("run", [run_single, run_batch])
@pytest.mark.parametrize("name", ["llama", "qwen3", "llama 4-bit", "llama mixed"])
def test_logits_equal_the_separate_primitives_bit_for_bit(models, separate, name, run):
    assert_forwards_equal(models[name], run, separate)


def test_an_adapted_projection_runs_the_block_as_separate_primitives(models):
    from engine.adapters.layers import Adapted
    from engine.kernels import whole_layer
    from engine.layering import install, uninstall

    block = models["llama"].model.layers[1]
    assert whole_layer.plan(block) is not None
    install(block.mlp.down_proj, Adapted)
    try:
        assert whole_layer.plan(block) is None
    finally:
        uninstall(block.mlp.down_proj, Adapted)
    assert whole_layer.plan(block) is not None


def test_a_block_given_new_arrays_computes_with_them(models, separate):
    model = models["llama 4-bit"]
    block = model.model.layers[0]
    prompt = mx.array([[5, 6, 7, 8, 9]])

    def logits():
        return model(prompt, cache=mlx_lm.models.cache.make_prompt_cache(model))

    before = logits()
    kept = block.input_layernorm.weight
    try:
        block.input_layernorm.weight = kept * 3.0
        got = logits()
        with separate:
            want = logits()
    finally:
        block.input_layernorm.weight = kept
    assert mx.array_equal(got, want).item()
    assert not mx.array_equal(got, before).item()
    assert mx.array_equal(logits(), before).item()


def test_a_pending_step_keeps_the_weights_it_was_built_with(models):
    """The primitive holds its layer's weights itself (they are not graph inputs): a graph
    built before the block's arrays change computes with the arrays it was built with."""
    import gc

    import numpy as np

    from engine.kernels import whole_layer

    model = models["llama 4-bit"]
    block = model.model.layers[0]
    prompt = mx.array([[5, 6, 7, 8, 9]])
    want = model(prompt, cache=mlx_lm.models.cache.make_prompt_cache(model))
    mx.eval(want)
    saved = np.array(block.input_layernorm.weight)
    pending = model(prompt, cache=mlx_lm.models.cache.make_prompt_cache(model))
    block.input_layernorm.weight = mx.array(saved * 3.0)
    assert whole_layer.plan(block) is not None  # a new plan: the old one is held by the graph only
    gc.collect()
    mx.eval([mx.full(saved.shape, 7.0) for _ in range(8)])  # reuse freed buffers, were any freed
    try:
        assert mx.array_equal(pending, want).item()
    finally:
        block.input_layernorm.weight = mx.array(saved)


_HELD_BY_THE_GRAPH_ONLY = """
import sys
import engine
import mlx.core as mx
from engine.kernels import ext, whole_layer
from engine.loading.model import load_generation_model

block = load_generation_model(sys.argv[1]).model.model.layers[0]
attn = block.self_attn
keys = mx.zeros((1, attn.n_kv_heads, 8, attn.head_dim))
weight = block.input_layernorm.weight
for _ in range(20):
    out = ext().decoder_layer(mx.ones((1, 2, weight.shape[0])),
                              whole_layer._make(block, whole_layer._parts(block)),  # held by the graph only
                              mx.array([0], dtype=mx.int32), keys, keys, 0, True)[0]
    mx.async_eval(out)
    del out  # the task now holds the last of those weights
    block.input_layernorm.weight = weight * 1.0  # lazy: the next weights are evaluated as they are made
    whole_layer._make(block, whole_layer._parts(block))
    block.input_layernorm.weight = weight
print("done")
"""


def test_weights_held_by_a_graph_only_are_released_on_the_stream_thread(K, fixture_models):
    """The last hold on a layer's weights may go on MLX's stream thread while the main thread
    waits for the stream (here making new weights, which evaluates them): releasing it must
    not need the GIL (with a hold that did, this deadlocked)."""
    import subprocess
    import sys
    from pathlib import Path

    run = subprocess.run([sys.executable, "-c", _HELD_BY_THE_GRAPH_ONLY, str(fixture_models["llama"])],
                         capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert run.returncode == 0 and run.stdout.strip() == "done", run.stderr[-2000:]


def test_weights_that_do_not_fit_the_spec_are_refused(K, models):
    from engine.kernels import whole_layer

    block = models["llama"].model.layers[0]
    layer = whole_layer.plan(block)
    attn = block.self_attn
    D, Dh = block.input_layernorm.weight.shape[0], attn.head_dim
    args = dict(qkv=[(0, 0, False)], o=(0, 0, False), gate_up=[(0, 0, False)], down=(0, 0, False), eps1=1e-5,
                eps2=1e-5, q_heads=attn.n_heads, kv_heads=attn.n_kv_heads, head_dim=Dh, qk_norm=False,
                qk_eps=0.0, dims=attn._rope.dims, traditional=False, rope_scale=1.0, scale=attn.scale)
    weights = [block.input_layernorm.weight, attn.qkv_proj.weight, attn._rope.inv_freqs, attn.o_proj.weight,
               block.post_attention_layernorm.weight, block.mlp.gate_up_proj.weight, block.mlp.down_proj.weight]
    K.LayerWeights(weights, **args)  # as the plan makes it
    with pytest.raises(ValueError, match="more weights"):
        K.LayerWeights([*weights, weights[0]], **args)
    with pytest.raises(ValueError, match="fewer weights"):
        K.LayerWeights(weights[:-1], **args)
    with pytest.raises(ValueError, match="heads"):
        K.LayerWeights(weights, **{**args, "kv_heads": attn.n_kv_heads + 1})
    with pytest.raises(ValueError, match="K does not match"):
        K.LayerWeights([weights[0], weights[6], *weights[2:]], **args)
    x = mx.zeros((1, 2, D))
    keys = mx.zeros((1, attn.n_kv_heads, 4, Dh))
    offsets = mx.array([0], dtype=mx.int32)
    with pytest.raises(ValueError, match="do not fit"):
        K.decoder_layer(x, layer, offsets, keys, keys, 3, True)
    with pytest.raises(ValueError, match="D the norms"):
        K.decoder_layer(mx.zeros((1, 2, D + 1)), layer, offsets, keys, keys, 0, True)
    with pytest.raises(ValueError, match="broadcast"):
        K.decoder_layer(x, layer, offsets, keys, keys, 0, False, mx.ones((1, 1, 2, 3), dtype=mx.bool_))
    out, k, v, after = K.decoder_layer(x, layer, offsets, keys, keys, 0, True)
    mx.eval(out, k, v, after)
    assert out.shape == x.shape and after.tolist() == [2]
