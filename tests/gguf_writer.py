"""GGUF files made from the fixture models with ``gguf``'s own writer, as llama.cpp's
converter lays them out: tensors named by gguf's TensorNameMap for the architecture (as the
converter names them), ``<arch>.*`` metadata, the byte-level BPE vocabulary, q/k
rows permuted for the llama and granite architectures, Gemma's norms written as
weight + 1 (q/k norms too for gemma3), phi3's fused qkv/gate_up under its own names, Qwen3-MoE's experts stacked
[n_expert, ...] (``ffn_*_exps``, quantized along the last axis, the router in F32), 1-D tensors in F32 and
every matrix in the chosen GGML type (``tests.gguf_quantizers`` makes the blocks)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

from engine.loading.gguf import permute_qk
from tests.gguf_quantizers import quantize

_SUFFIXES = (".weight", ".bias")
F32_ALWAYS = ("ffn_gate_inp",)  # llama.cpp keeps the MoE router in F32
GGUF_ARCH = {"gemma3_text": "gemma3", "qwen3_moe": "qwen3moe"}  # mlx-lm model_type -> general.architecture
PERMUTED = ("llama", "granite")  # llama.cpp's LlamaModel and its subclasses permute q/k
NORM_PLUS_ONE = ("gemma2", "gemma3")  # Gemma2Model and Gemma3Model write every norm weight + 1
CONTROL, NORMAL, UNUSED = 3, 1, 5


def gguf_name(hf: str, arch: str = "llama", n_blocks: int = 64) -> str:
    """The name llama.cpp's converter gives Hugging Face tensor ``hf``: gguf's TensorNameMap for
    ``arch`` (llama's for a tensor ``arch`` does not have, so that a file can be mislabeled on purpose)."""
    for name in (arch, "llama"):
        if name in _ARCHES and (found := _name_map(name, n_blocks).get_name(hf, try_suffixes=_SUFFIXES)):
            return found
    raise KeyError(f"no GGUF name for {hf!r} in {arch}")


_ARCHES = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}


@functools.lru_cache(maxsize=None)
def _name_map(arch: str, n_blocks: int) -> gguf.TensorNameMap:
    return gguf.get_tensor_name_map(_ARCHES[arch], n_blocks)


def _get(config: dict, *keys: str):
    return next(config[k] for k in keys if k in config)


def write_gguf(model_dir: Path, out: Path, qtype: gguf.GGMLQuantizationType, *,
               embedding_type: gguf.GGMLQuantizationType | None = None, arch: str | None = None,
               extra_tensors: dict[str, np.ndarray] | None = None, vocab: dict | None = None) -> Path:
    """``model_dir`` (a fixture of any served architecture) as a GGUF file of matrices in
    ``qtype`` (the token embedding in ``embedding_type``, default ``qtype``). A Llama 3
    ``rope_scaling`` in its config becomes llama.cpp's ``rope_freqs`` tensor;
    ``arch`` overrides ``general.architecture``; ``extra_tensors`` are added as F32;
    ``vocab`` (``tokenizer.*`` metadata) replaces the fixture's byte-level BPE vocabulary."""
    config = json.loads((model_dir / "config.json").read_text())
    arch = arch or GGUF_ARCH.get(config["model_type"], config["model_type"])
    writer = gguf.GGUFWriter(str(out), arch)
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type") == "llama3":
        from engine.loading.gguf_config import llama3_rope_factors

        writer.add_tensor("rope_freqs.weight", llama3_rope_factors(scaling, config["rope_theta"], config["head_dim"]))
    if "linear" in (scaling.get("rope_type"), scaling.get("type")):
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(scaling["factor"])
    layers = _get(config, "num_hidden_layers", "num_layers")
    writer.add_block_count(layers)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    if arch != "phi3":  # Phi3MiniModel writes the rope dimensions instead
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])
    if "rms_norm_eps" in config:
        writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    else:  # TextModel writes the LayerNorm key for these names (EXAONE's RMSNorm included)
        writer.add_layer_norm_eps(_get(config, "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"))
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_vocab_size(config["vocab_size"])
    _add_arch_metadata(writer, arch, config)
    for name, value in (extra_tensors or {}).items():
        writer.add_tensor(name, np.asarray(value, dtype=np.float32))
    if vocab is None:
        _add_vocab(writer, model_dir, config)
    else:
        _add_metadata(writer, vocab)
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    for name, value in sorted(_stack_experts(load_file(str(model_dir / "model.safetensors"))).items()):
        target = gguf_name(name, arch, layers)
        value = value.astype(np.float32)
        kind = target.split(".")[-2]
        if arch in PERMUTED and kind in heads:
            value = permute_qk(value, heads[kind])
        if arch in NORM_PLUS_ONE and kind.endswith("norm"):
            value = value + 1
        if value.ndim == 1 or kind in F32_ALWAYS:
            writer.add_tensor(target, value)
            continue
        kind_type = embedding_type if (target.startswith("token_embd") and embedding_type) else qtype
        if kind_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            dtype = np.float32 if kind_type == gguf.GGMLQuantizationType.F32 else np.float16
            writer.add_tensor(target, np.ascontiguousarray(value, dtype=dtype))
        else:
            blocks = quantize(value.reshape(-1, value.shape[-1]), kind_type)  # along the last axis
            writer.add_tensor(target, blocks.reshape(*value.shape[:-1], -1), raw_dtype=kind_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _stack_experts(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-expert ``mlp.experts.E.X_proj`` stacked [n_expert, ...] as ``mlp.experts.X_proj``, the
    name llama.cpp's converter gives the merged tensor (``ffn_X_exps``)."""
    out, experts = {}, {}
    for name, value in weights.items():
        parts = name.split(".")
        if len(parts) == 8 and parts[3:5] == ["mlp", "experts"]:
            stacked = ".".join([*parts[:5], *parts[6:]])
            experts.setdefault(stacked, {})[int(parts[5])] = value
        else:
            out[name] = value
    out.update({name: np.stack([e[i] for i in sorted(e)]) for name, e in experts.items()})
    return out


def _add_arch_metadata(writer: gguf.GGUFWriter, arch: str, config: dict) -> None:
    """The ``<arch>.*`` keys llama.cpp's converter writes for phi3, granite, gemma2 and gemma3."""
    if arch == "phi3":
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        writer.add_rope_dimension_count(int(head_dim * config.get("partial_rotary_factor", 1.0)))
        writer.add_rope_scaling_orig_ctx_len(config.get("original_max_position_embeddings", 4096))
    elif arch == "granite":
        writer.add_embedding_scale(config["embedding_multiplier"])
        writer.add_residual_scale(config["residual_multiplier"])
        writer.add_attention_scale(config["attention_multiplier"])
        writer.add_logit_scale(config["logits_scaling"])
    elif arch == "qwen3moe":
        writer.add_expert_count(config["num_experts"])
        writer.add_expert_used_count(config["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    elif arch == "gemma2":
        writer.add_attn_logit_softcapping(config["attn_logit_softcapping"])
        writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    elif arch == "exaone":  # ExaoneModel writes the rotary dimensions
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        writer.add_rope_dimension_count(int(head_dim * config.get("partial_rotary_factor", 1.0)))
    if arch in ("phi3", "gemma2", "gemma3") and config.get("sliding_window"):
        writer.add_sliding_window(config["sliding_window"])


def _add_metadata(writer: gguf.GGUFWriter, meta: dict) -> None:
    """``tokenizer.*`` keys given as plain values (lists of str, float or int; bools; ints)."""
    T = gguf.GGUFValueType
    for key, value in meta.items():
        if not key.startswith("tokenizer."):
            continue
        if isinstance(value, list):
            sub = T.STRING if isinstance(value[0], str) else T.FLOAT32 if isinstance(value[0], float) else T.INT32
            writer.add_key_value(key, value, T.ARRAY, sub)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        else:
            writer.add_string(key, value)


def _add_vocab(writer: gguf.GGUFWriter, model_dir: Path, config: dict) -> None:
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = dict(tok["model"]["vocab"])
    special = {t["content"]: t["id"] for t in tok["added_tokens"]}
    vocab.update(special)
    size = config["vocab_size"]
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [UNUSED] * size
    for text, i in vocab.items():
        tokens[i], types[i] = text, CONTROL if text in special else NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    tok_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(tok_config["chat_template"])
