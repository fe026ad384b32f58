"""The kernels in a vision tower: a LLaVA fixture loads with them in its tower and
projector, the image features stay within float rounding of MLX's own ops, and the
attention wrapper leaves every caller outside a tower's forward, and a windowed tower's
empty split, with MLX's function."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest

from tests.fixtures.vision_models import build_llava
from tests.kernel_helpers import kernels_ext


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    kernels_ext()
    return build_llava(tmp_path_factory.mktemp("tower-kernels") / "llava")


@pytest.fixture(scope="module")
def served(llava_dir):
    from engine.loading.model import load_generation_model

    return load_generation_model(llava_dir)


def test_tower_features_with_kernels_equal_mlx_ops_within_rounding(llava_dir, served):
    from engine.vision.model import load_vision_model

    assert served.kernels.get("tower tower_attention dispatch") == 1 and served.kernels.get("tower linear", 0) > 0
    _, _, stock = load_vision_model(llava_dir, json.loads((llava_dir / "config.json").read_text()))
    pixels = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    want, got = stock.features(pixels), served.vision.features(pixels)
    assert got.shape == want.shape
    assert (mx.abs(got - want).max() / mx.abs(want).max()).item() < 1e-5


def test_attention_outside_a_tower_is_mlx_own(served):
    sdpa = mx.fast.scaled_dot_product_attention
    assert hasattr(sdpa, "stock")  # installed by the tower's load
    q = mx.random.normal((1, 2, 5, 8))
    assert mx.array_equal(sdpa(q, q, q, scale=0.5), sdpa.stock(q, q, q, scale=0.5)).item()
    assert mx.array_equal(sdpa(q, q, q, scale=0.5, mask="causal"), sdpa.stock(q, q, q, scale=0.5, mask="causal")).item()


def test_a_windowed_tower_s_empty_split_is_mlx_own(tmp_path):
    """Qwen2.5-VL's tower splits its patches at window boundaries, and an image that is one
    window gives an empty split: the kernels leave it to MLX (they divided by its zero
    length), and the features equal MLX's own ops within rounding."""
    from engine.kernels import ops
    from engine.loading.model import load_generation_model
    from tests.fixtures.vision_qwen import build_qwen2_5_vl

    kernels_ext()
    empty = mx.zeros((1, 2, 0, 16))
    assert ops.attention(empty, empty, empty, scale=0.25) is None
    qwen = build_qwen2_5_vl(tmp_path / "qwen")
    stock, served = load_generation_model(qwen, use_kernels=False), load_generation_model(qwen)
    pixels = np.random.default_rng(0).random((1, 4, 4, 1176), dtype=np.float32)  # a 2 x 2 merged grid: one window
    want, got = stock.vision.features(pixels), served.vision.features(pixels)
    assert served.kernels.get("tower tower_attention dispatch") == 1 and got.shape == want.shape == (1, 4, 64)
    assert (mx.abs(got - want).max() / mx.abs(want).max()).item() < 1e-5
