"""The benchmark's Llama-3.2-shaped random GGUF (bench.real_models), at a tiny shape: the file
is what llama.cpp's converter writes (q/k rows in GGUF order, Llama 3's rope_freqs, the
embedded SmolLM2's tokenizer), our loader reads back the Hugging Face weights the maker drew,
and the model generates."""

from __future__ import annotations

import json

import gguf
import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from engine.loading.embedded import EmbeddedModelMissing, default_generation_model

TINY = dict(name="tiny", hidden=128, layers=2, heads=4, kv_heads=2, mlp=256)


@pytest.fixture(scope="module")
def smollm():
    try:
        return default_generation_model()
    except EmbeddedModelMissing as exc:
        pytest.skip(str(exc))


def test_the_random_llama_gguf_loads_with_its_weights_and_generates(smollm, gguf_cache, tmp_path):
    from bench.real_models import Shape, hf_weight, write_f16
    from engine.loading.model import load_generation_model

    shape = Shape(**TINY)
    path = write_f16(shape, tmp_path / "tiny.F16.gguf", seed=7, tokenizer_source=smollm)
    again = write_f16(shape, tmp_path / "again.F16.gguf", seed=7, tokenizer_source=smollm)
    assert path.read_bytes() == again.read_bytes()  # the seed makes the file

    reader, source = gguf.GGUFReader(str(path)), gguf.GGUFReader(str(smollm))
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.pre", "tokenizer.ggml.eos_token_id"):
        assert reader.fields[key].contents() == source.fields[key].contents(), key
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert "output.weight" not in types  # tied embeddings
    assert types["token_embd.weight"] == types["blk.1.attn_q.weight"] == "F16"
    assert types["blk.0.attn_norm.weight"] == types["rope_freqs.weight"] == "F32"
    assert reader.fields["llama.rope.freq_base"].contents() == 500000.0

    loaded = load_generation_model(path, dtype="float32", use_kernels=False)
    config = json.loads((loaded.artifact / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
            config["num_key_value_heads"], config["intermediate_size"]) == (128, 2, 4, 2, 256)
    assert config["rope_scaling"]["rope_type"] == "llama3" and config["rope_scaling"]["factor"] == 32.0
    assert config["tie_word_embeddings"] and config["vocab_size"] == 49152
    weights = dict(tree_flatten(loaded.model.parameters()))
    for name, gguf_name, rows in (("q_proj", "attn_q", 128), ("k_proj", "attn_k", 64), ("v_proj", "attn_v", 64)):
        got = np.array(weights[f"model.layers.1.self_attn.{name}.weight"])
        assert np.array_equal(got, hf_weight(7, f"blk.1.{gguf_name}", rows, 128).astype(np.float32)), name

    ids = loaded.tokenizer.encode("The capital of France is")
    tokens = []
    for _ in range(3):  # greedy, the whole sequence each step
        logits = loaded.model(mx.array([ids + tokens]))[0, -1]
        assert bool(mx.all(mx.isfinite(logits)))
        tokens.append(int(mx.argmax(logits)))
    assert all(0 <= t < 49152 for t in tokens)
