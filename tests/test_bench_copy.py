"""The benchmark's float32 copy (bench.common.prepare_f32) of a quantized GGUF file:
mlx-lm loads it as a plain float model (no fused layer names, no quantization) and
it holds exactly the values ``gguf``'s dequantizer reads from the file."""

from __future__ import annotations

import json

import gguf
import mlx.core as mx
import mlx.nn as nn
import mlx_lm
import numpy as np
from mlx.utils import tree_flatten

from tests.fixtures.models import build_model
from tests.gguf_reference import float_tensors
from tests.gguf_writer import write_gguf


def test_the_float32_copy_of_a_quantized_gguf_is_what_mlx_lm_loads(gguf_cache, tmp_path):
    from bench.common import prepare_f32

    path = write_gguf(build_model("llama", tmp_path / "llama"), tmp_path / "llama.Q4_1.gguf",
                      gguf.GGMLQuantizationType.Q4_1)
    logs: list[str] = []
    copy = prepare_f32(path, logs.append)
    assert logs and copy.is_relative_to(gguf_cache)
    config = json.loads((copy / "config.json").read_text())
    assert "quantization" not in config and config["torch_dtype"] == "float32"
    model, _ = mlx_lm.load(str(copy))
    assert not any(isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)) for _, m in model.named_modules())
    want = float_tensors(path, config)
    got = dict(tree_flatten(model.parameters()))
    assert set(got) == set(want)
    for name, value in got.items():
        assert value.dtype == mx.float32 and np.array_equal(np.array(value), want[name]), name
    assert prepare_f32(path, logs.append) == copy and len(logs) == 1  # made once
