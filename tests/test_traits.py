"""ModelTraits: what differs per architecture, read once at load from the model itself."""

from __future__ import annotations

import dataclasses

import pytest

from engine.loading.model import load_generation_model
from engine.loading.traits import config_value

EXPECTED = {  # kind: (family, rolls back, fused by the kernels, rope kind)
    "llama": ("llama", True, True, "rope"),
    "qwen3": ("qwen3", True, True, "rope"),
    "sliding": ("llama", False, True, "rope"),
    "lfm2": ("lfm2", False, False, "rope"),
}


@pytest.mark.parametrize("kind", list(EXPECTED))
@pytest.mark.parametrize("use_kernels", [False, True])
def test_traits_are_the_model_s_whatever_the_kernels(fixture_models, kind, use_kernels):
    loaded = load_generation_model(fixture_models[kind], use_kernels=use_kernels)
    t = loaded.traits
    assert (t.family, t.can_roll_back, t.fusable, t.rope) == EXPECTED[kind]
    assert t.model_type == loaded.config["model_type"] and t.blocks == loaded.config["num_hidden_layers"]
    assert t.context_length == loaded.config["max_position_embeddings"] == loaded.context_length
    assert t.vocab_size == loaded.config["vocab_size"] >= len(loaded.tokenizer)


def test_a_nested_text_config_is_read_after_the_top_level():
    config = {"model_type": "vlm", "vocab_size": None, "text_config": {"vocab_size": 7, "hidden_size": 4},
              "hidden_size": 8}
    assert config_value(config, "vocab_size") == 7
    assert config_value(config, "hidden_size") == 8
    assert config_value(config, "head_dim", default=3) == 3


def test_a_bos_already_in_the_text_is_not_added_again(fixture_models):
    t = load_generation_model(fixture_models["llama"]).traits
    assert t.bos_token is None and t.adds_bos("hello")  # no BOS: special tokens always go in
    with_bos = dataclasses.replace(t, bos_token="<s>")
    assert with_bos.adds_bos("hello") and not with_bos.adds_bos("<s>hello")
