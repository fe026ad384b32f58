"""A GGUF file's metadata in Hugging Face terms: served architectures, ``config.json``, tensor names.

Invariant: an unknown architecture or tensor raises ``UnsupportedModel`` before any weight is converted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Collection, Mapping

import numpy as np

from ..errors import UnsupportedModel

__all__ = ["ARCHITECTURES", "Architecture", "build_config", "hf_name", "permute_qk", "unpermute_qk"]


@dataclass(frozen=True)
class Architecture:
    model_type: str  # mlx-lm's module (mlx_lm.models.<model_type>)
    hf_class: str
    permuted_qk: bool  # llama.cpp's converter permuted the q/k rows for its rope
    attention_bias: bool = False
    qk_norm: bool = False


# general.architecture -> the mlx-lm model. Mistral, SmolLM and Llama 3 files say "llama".
ARCHITECTURES = {
    "llama": Architecture("llama", "LlamaForCausalLM", permuted_qk=True),
    "qwen2": Architecture("qwen2", "Qwen2ForCausalLM", permuted_qk=False, attention_bias=True),
    "qwen3": Architecture("qwen3", "Qwen3ForCausalLM", permuted_qk=False, qk_norm=True),
}

# GGUF tensor name (inside "blk.N.") -> Hugging Face name (inside "model.layers.N.").
_LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
# Tensors that are folded into the config instead of the weights.
CONFIG_TENSORS = frozenset({"rope_freqs.weight"})


def architecture(meta: Mapping[str, Any]) -> Architecture:
    arch = str(meta.get("general.architecture", ""))
    if arch not in ARCHITECTURES:
        raise UnsupportedModel(f"GGUF architecture {arch!r} is not served; served: {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


def hf_name(base: str) -> str:
    """Hugging Face tensor name (without ``.weight``) for a GGUF tensor base name."""
    if base in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[base]
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_TENSORS:
        return f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}"
    raise UnsupportedModel(f"GGUF tensor {base!r} is not part of a model this server knows")


def permute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's ``permute``: HF rope order -> GGUF order (``n_head``: this projection's heads)."""
    rows = weight.shape[0]
    halves = weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:])
    return halves.swapaxes(1, 2).reshape(weight.shape)


def unpermute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of :func:`permute_qk`: GGUF q/k projection rows -> Hugging Face order."""
    rows = weight.shape[0]
    pairs = weight.reshape(n_head, rows // n_head // 2, 2, *weight.shape[1:])
    return pairs.swapaxes(1, 2).reshape(weight.shape)


def build_config(meta: Mapping[str, Any], tensors: Collection[str],
                 rope_freqs: np.ndarray | None = None) -> dict[str, Any]:
    """The ``config.json`` of a GGUF file, from its metadata and tensor names."""
    arch = architecture(meta)
    prefix = str(meta["general.architecture"])

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{prefix}.{key}", default)

    hidden, heads = get("embedding_length"), get("attention.head_count")
    head_dim = get("attention.key_length", hidden // heads)
    config: dict[str, Any] = {
        "architectures": [arch.hf_class],
        "model_type": arch.model_type,
        "hidden_size": hidden,
        "intermediate_size": get("feed_forward_length"),
        "num_hidden_layers": get("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": get("attention.head_count_kv", heads),
        "head_dim": head_dim,
        "vocab_size": get("vocab_size", len(meta["tokenizer.ggml.tokens"])),
        "max_position_embeddings": get("context_length"),
        "rms_norm_eps": get("attention.layer_norm_rms_epsilon"),
        "rope_theta": get("rope.freq_base", 10000.0),
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": arch.attention_bias,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in tensors,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float16",
    }
    scaling = get("rope.scaling.type", "none")
    if scaling == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": get("rope.scaling.factor")}
    elif scaling not in ("none", None):
        raise UnsupportedModel(f"GGUF rope scaling {scaling!r} is not served (linear and Llama 3's are)")
    if rope_freqs is not None:
        config["rope_scaling"] = llama3_rope_scaling(rope_freqs, config["rope_theta"], head_dim)
    return config


def llama3_rope_scaling(freqs: np.ndarray, base: float, dims: int) -> dict[str, Any]:
    """Llama 3's rope_scaling from llama.cpp's ``rope_freqs``, checked by recomputing every factor."""
    factor = float(np.max(freqs))
    scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    if not np.allclose(llama3_rope_factors(scaling, base, dims), freqs, rtol=1e-4, atol=1e-6):
        raise UnsupportedModel("GGUF rope_freqs do not follow Llama 3's rope scaling; this file is not served")
    return scaling


def llama3_rope_factors(scaling: Mapping[str, Any], base: float, dims: int) -> np.ndarray:
    """The per-pair factors llama.cpp's converter writes as ``rope_freqs`` for Llama 3."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    freqs = 1.0 / base ** (np.arange(0, dims, 2, dtype=np.float64) / dims)
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)
