"""What Gemma 3 and Qwen3-MoE GGUF files carry beyond the shared checks of
``tests.test_gguf_archs`` (which serve them token for token): Gemma 3's hard-coded
sliding-window pattern, local rope base and query scale in the config, a window that
changes the output of the fixture, every norm (q/k included) back without the converter's
+1, vision tensors refused by name; Qwen3-MoE's expert config, its stacked experts served
quantized (QuantizedSwitchLinear) with exactly the file's values, dense or unrouted layers
refused."""

from __future__ import annotations

import json
import shutil

import gguf
import mlx.core as mx
import mlx_lm
import numpy as np
import pytest

from engine.errors import UnsupportedModel
from engine.loading.gguf import prepare_gguf
from engine.loading.gguf_config import build_config
from tests.fixtures.gguf_models import GEMMA3_WINDOW
from tests.gguf_writer import write_gguf
from tests.oracle import ORACLE_PROMPTS
from tests.test_gguf_archs import made, sources  # noqa: F401  (module-scoped fixtures)
from tests.test_kernels_models import greedy

Q = gguf.GGMLQuantizationType


def test_gemma3_config_maps_llama_cpps_hard_coded_pattern(made):
    config = json.loads((made("gemma3", Q.F32)[1] / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["architectures"] == ["Gemma3ForCausalLM"]
    assert (config["sliding_window"], config["sliding_window_pattern"]) == (GEMMA3_WINDOW, 6)
    assert (config["rope_theta"], config["rope_local_base_freq"]) == (1000000.0, 10000.0)
    assert config["rope_scaling"] == {"type": "linear", "factor": 8.0}
    assert (config["head_dim"], config["query_pre_attn_scalar"], config["tie_word_embeddings"]) == (32, 32, True)


def test_the_gemma3_window_changes_the_fixtures_output(sources, tmp_path):
    """Otherwise the token-for-token checks could not see a wrong window or pattern."""
    wide = shutil.copytree(sources("gemma3"), tmp_path / "wide")
    config = json.loads((wide / "config.json").read_text())
    config["sliding_window"] = 4096
    (wide / "config.json").write_text(json.dumps(config))
    (local, tokenizer), (full, _) = mlx_lm.load(str(sources("gemma3"))), mlx_lm.load(str(wide))
    ids = tokenizer.encode(ORACLE_PROMPTS["long"])
    assert len(ids) > 2 * GEMMA3_WINDOW
    assert greedy(local, ids, 8) != greedy(full, ids, 8)


def test_gemma3_norms_qk_included_come_back_without_the_converters_one(sources, made):
    from safetensors.numpy import load_file

    fixture = load_file(str(sources("gemma3") / "model.safetensors"))
    converted = mx.load(str(made("gemma3", Q.F32)[1] / "model.safetensors"))
    names = [n for n in fixture if "norm" in n]
    assert any("q_norm" in n for n in names) and any("k_norm" in n for n in names)
    for name in names:
        np.testing.assert_array_equal(np.array(converted[name]), fixture[name])


def test_a_gemma3_file_with_vision_tensors_is_refused_by_name(sources, tmp_path):
    path = write_gguf(sources("gemma3"), tmp_path / "m.gguf", Q.F32,
                      extra_tensors={"v.patch_embd.weight": np.ones(32, dtype=np.float32)})
    with pytest.raises(UnsupportedModel, match=r"v\.patch_embd"):
        prepare_gguf(path, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/model.safetensors"))


def _meta(arch: str, layers: int, **keys) -> dict:
    meta = {"general.architecture": arch, "tokenizer.ggml.tokens": ["a"] * 8, f"{arch}.block_count": layers,
            f"{arch}.embedding_length": 5376, f"{arch}.attention.head_count": 32, f"{arch}.context_length": 8192,
            f"{arch}.feed_forward_length": 1024, f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
            f"{arch}.attention.key_length": 128}
    meta.update({f"{arch}.{k.replace('__', '.')}": v for k, v in keys.items()})
    return meta


def test_gemma3_query_scale_follows_llama_cpp_by_model_size():
    small = build_config(_meta("gemma3", 48, attention__sliding_window=1024), {"token_embd.weight"})
    large = build_config(_meta("gemma3", 62, attention__sliding_window=1024), {"token_embd.weight"})
    assert (small["query_pre_attn_scalar"], large["query_pre_attn_scalar"]) == (128, 168)


@pytest.mark.parametrize("keys, refused", [({}, "sliding_window"),
                                           ({"attention__sliding_window": 8, "final_logit_softcapping": 30.0},
                                            "final_logit_softcapping")])
def test_gemma3_files_mlx_lm_cannot_compute_are_refused(keys, refused):
    with pytest.raises(UnsupportedModel, match=refused):
        build_config(_meta("gemma3", 26, **keys), {"token_embd.weight"})


def test_qwen3moe_config_carries_the_experts(made):
    from tests.fixtures.gguf_models import QWEN3MOE_EXPERTS, QWEN3MOE_FFN, QWEN3MOE_USED

    config = json.loads((made("qwen3moe", Q.F32)[1] / "config.json").read_text())
    assert config["model_type"] == "qwen3_moe" and config["architectures"] == ["Qwen3MoeForCausalLM"]
    assert (config["num_experts"], config["num_experts_per_tok"], config["moe_intermediate_size"]) == (
        QWEN3MOE_EXPERTS, QWEN3MOE_USED, QWEN3MOE_FFN)
    assert (config["decoder_sparse_step"], config["mlp_only_layers"], config["norm_topk_prob"]) == (1, [], True)


@pytest.mark.parametrize("qtype, bits", [(Q.Q8_0, 8), (Q.Q4_0, 4)])
def test_qwen3moe_stacked_experts_stay_quantized_with_the_files_values(made, qtype, bits):
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear

    from engine.loading.model import load_generation_model
    from tests.gguf_reference import float_tensors

    path, converted, _ = made("qwen3moe", qtype)
    types = {t.name: (t.tensor_type, len(t.shape)) for t in gguf.GGUFReader(str(path)).tensors}
    assert types["blk.0.ffn_down_exps.weight"] == (qtype, 3) and types["blk.0.ffn_gate_inp.weight"][0] == Q.F32
    served = load_generation_model(converted, use_kernels=False)
    want = float_tensors(path, served.config)
    for name in ("gate_proj", "up_proj", "down_proj"):
        layer = getattr(served.model.model.layers[1].mlp.switch_mlp, name)
        assert isinstance(layer, QuantizedSwitchLinear) and layer.bits == bits
        got = mx.dequantize(layer.weight, layer.scales, layer.biases, layer.group_size, layer.bits)
        np.testing.assert_allclose(np.array(got.astype(mx.float32)),
                                   want[f"model.layers.1.mlp.switch_mlp.{name}.weight"], rtol=1e-6, atol=1e-6)


def _moe_meta(**keys) -> dict:
    return _meta("qwen3moe", 2, feed_forward_length=768, expert_count=4, expert_used_count=2, **keys)


def test_qwen3moe_defaults_the_expert_size_as_llama_cpp():
    routers = {f"blk.{i}.ffn_gate_inp.weight" for i in range(2)}
    assert build_config(_moe_meta(), routers)["moe_intermediate_size"] == 384  # feed_forward_length / used


@pytest.mark.parametrize("tensors, refused", [({"blk.0.ffn_gate_inp.weight"}, "block 1 has no router"),
                                              ({"blk.0.ffn_gate_inp.weight", "blk.1.ffn_gate_inp.weight",
                                                "blk.1.ffn_up.weight"}, "blk.1.ffn_up.weight")])
def test_qwen3moe_files_with_dense_or_unrouted_layers_are_refused(tensors, refused):
    with pytest.raises(UnsupportedModel, match=refused):
        build_config(_moe_meta(), tensors)
