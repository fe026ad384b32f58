"""The GGUF architectures, tensor names and config derived from gguf's tables and mlx-lm's models
(``engine.loading.gguf_arch``, ``gguf_names``, ``gguf_config``): the derived names equal the
hand table they replaced for every architecture it held; the served list is what both sides know
less the refused; a tensor with no place, a shape that differs, a parameter the file lacks, a
numerics key not carried, a partial rotary the model cannot take are each refused by name."""

from __future__ import annotations

import json

import gguf
import pytest

from engine.errors import UnsupportedModel
from engine.loading.gguf import prepare_gguf, served_tensor_names
from engine.loading.gguf_arch import REFUSED, TESTED, served_architectures
from engine.loading.gguf_config import build_config
from engine.loading.gguf_file import read_gguf
from engine.loading.gguf_names import tensor_names
from tests.fixtures.models import build_model
from tests.gguf_writer import write_gguf
from tests.test_gguf_archs import made, sources  # noqa: F401  (module-scoped fixtures)

Q = gguf.GGMLQuantizationType

# The hand table the derivation replaced (GGUF name in "blk.N." -> Hugging Face name in "model.layers.N.").
_LLAMA = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
          "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
          "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
          "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_GEMMA = {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
          "post_ffw_norm": "post_feedforward_layernorm"}
_FORMER = {
    "phi3": {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},
    "granite": {}, "gemma2": _GEMMA, "gemma3": _GEMMA,
    "qwen3moe": {"ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
                 "ffn_up_exps": "mlp.switch_mlp.up_proj", "ffn_down_exps": "mlp.switch_mlp.down_proj"},
}
_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def _former_name(arch: str, gguf_name: str) -> str:
    base, suffix = gguf_name.rsplit(".", 1)
    if base in _GLOBAL:
        return f"{_GLOBAL[base]}.{suffix}"
    _, layer, kind = base.split(".")
    return f"model.layers.{layer}.{_FORMER.get(arch, {}).get(kind) or _LLAMA[kind]}.{suffix}"


@pytest.mark.parametrize("arch", list(_FORMER))
def test_derived_names_equal_the_former_hand_table(made, arch):
    path, converted, _ = made(arch, Q.F32)
    config = json.loads((converted / "config.json").read_text())
    names = served_tensor_names(read_gguf(path), config)
    assert names == {name: _former_name(arch, name) for name in names}


def test_derived_names_equal_the_former_hand_table_for_llama(tmp_path):
    path = write_gguf(build_model("llama", tmp_path / "llama"), tmp_path / "llama.gguf", Q.F32)
    converted = prepare_gguf(path, tmp_path / "cache")
    names = served_tensor_names(read_gguf(path), json.loads((converted / "config.json").read_text()))
    assert len(names) == 2 + 2 * 9 + 1 and names == {name: _former_name("llama", name) for name in names}


def test_the_served_list_is_what_gguf_and_mlx_lm_both_know_less_the_refused():
    import importlib.util

    from engine.loading.gguf_arch import architecture

    served = served_architectures()
    assert served[: len(TESTED)] == TESTED
    assert {"olmo2", "starcoder2", "exaone", "stablelm", "olmoe", "cohere2"} <= set(served)
    assert not set(served) & set(REFUSED)
    for name in served:
        assert name in gguf.MODEL_ARCH_NAMES.values()
        module = architecture({"general.architecture": name}).model_type
        assert importlib.util.find_spec(f"mlx_lm.models.{module}") is not None, name


@pytest.mark.parametrize("arch, reason", [("mamba", "recurrent"), ("internlm2", "wqkv"), ("bert", "do not both")])
def test_an_architecture_not_served_is_refused_with_its_reason(arch, reason):
    with pytest.raises(UnsupportedModel, match=f"'{arch}'.*{reason}.*served: llama, qwen2, qwen3"):
        build_config({"general.architecture": arch}, set())


def _meta(arch: str, **keys) -> dict:
    meta = {"general.architecture": arch, "tokenizer.ggml.tokens": ["a"] * 8, f"{arch}.block_count": 2,
            f"{arch}.embedding_length": 64, f"{arch}.attention.head_count": 4, f"{arch}.context_length": 4096,
            f"{arch}.feed_forward_length": 128, f"{arch}.attention.layer_norm_rms_epsilon": 1e-6}
    meta.update({f"{arch}.{k.replace('__', '.')}": v for k, v in keys.items()})
    return meta


def test_a_tensor_with_no_place_in_the_model_is_refused_by_name(tmp_path):
    # llama's tensors labelled olmo2: OLMo 2 has no pre-attention norm.
    path = write_gguf(build_model("llama", tmp_path / "llama"), tmp_path / "m.gguf", Q.F32, arch="olmo2")
    with pytest.raises(UnsupportedModel, match=r"'blk\.0\.attn_norm\.weight' has no place in mlx-lm's 'olmo2'"):
        prepare_gguf(path, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/model.safetensors"))


def test_a_shape_the_config_does_not_give_is_refused_by_name():
    config = build_config(_meta("llama", attention__head_count_kv=2), {"output.weight"})
    shapes = {"token_embd.weight": (8, 64), "output_norm.weight": (64,), "output.weight": (8, 64)}
    for i in range(2):
        shapes.update({f"blk.{i}.attn_norm.weight": (64,), f"blk.{i}.attn_q.weight": (64, 64),
                       f"blk.{i}.attn_k.weight": (32, 64), f"blk.{i}.attn_v.weight": (32, 64),
                       f"blk.{i}.attn_output.weight": (64, 64), f"blk.{i}.ffn_norm.weight": (64,),
                       f"blk.{i}.ffn_gate.weight": (128, 64), f"blk.{i}.ffn_up.weight": (128, 64),
                       f"blk.{i}.ffn_down.weight": (64, 128)})
    assert len(tensor_names("llama", config, shapes)) == len(shapes)
    with pytest.raises(UnsupportedModel, match=r"'blk\.1\.attn_k\.weight' has shape \(64, 64\)"):
        tensor_names("llama", config, {**shapes, "blk.1.attn_k.weight": (64, 64)})
    with pytest.raises(UnsupportedModel, match=r"needs 'model\.layers\.1\.mlp\.up_proj\.weight' "
                                               r"\(GGUF 'blk\.1\.ffn_up\.weight'\)"):
        tensor_names("llama", config, {k: v for k, v in shapes.items() if k != "blk.1.ffn_up.weight"})


@pytest.mark.parametrize("key, value", [("attention__clamp_kqv", 8.0), ("attention__sliding_window", 4096),
                                        ("logit_scale", 0.5)])
def test_a_numerics_key_not_carried_is_refused_by_name(key, value):
    assert build_config(_meta("olmo2", logit_scale=1.0), {"output.weight"})["model_type"] == "olmo2"  # neutral
    with pytest.raises(UnsupportedModel, match=key.replace("__", r"\.")):
        build_config(_meta("olmo2", **{key: value}), {"output.weight"})


def test_model_args_names_are_filled_from_their_synonyms():
    exaone = build_config(_meta("exaone", rope__dimension_count=16), {"output.weight"})
    assert (exaone["num_layers"], exaone["layer_norm_epsilon"]) == (2, 1e-6)
    meta = _meta("starcoder2", attention__layer_norm_epsilon=1e-5)
    del meta["starcoder2.attention.layer_norm_rms_epsilon"]
    assert build_config(meta, {"output.weight"})["norm_epsilon"] == 1e-5
    stablelm = build_config(_meta("stablelm", rope__dimension_count=4, use_parallel_residual=True,
                                  attention__head_count_kv=4), {"output.weight", "blk.0.attn_q.bias"})
    assert (stablelm["partial_rotary_factor"], stablelm["use_qkv_bias"], stablelm["use_parallel_residual"]) == (
        0.25, True, True)


def test_a_partial_rotary_the_model_cannot_take_is_refused():
    with pytest.raises(UnsupportedModel, match="rotating 8 of 16 head dimensions.*'llama'"):
        build_config(_meta("llama", rope__dimension_count=8), {"output.weight"})
    with pytest.raises(UnsupportedModel, match="use_parallel_residual"):
        build_config(_meta("olmo2", use_parallel_residual=True), {"output.weight"})
