"""A GGUF file's metadata in Hugging Face terms: the ``config.json`` mlx-lm reads.

Invariants: an unknown architecture, rope scaling or per-architecture key that changes the
numerics and is not carried over raises ``UnsupportedModel`` before any weight is converted;
defaults are llama.cpp's own where the file omits a key.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Collection, Mapping

import numpy as np

from ..errors import UnsupportedModel
from .gguf_arch import VISION_PREFIXES, ARCHITECTURES, Architecture, architecture, hf_name, permute_qk, unpermute_qk

__all__ = ["ARCHITECTURES", "Architecture", "architecture", "build_config", "hf_name", "permute_qk",
           "unpermute_qk"]


# Tensors that are folded into the config instead of the weights.
CONFIG_TENSORS = frozenset({"rope_freqs.weight"})
# Tensors of rope variants that are refused, by name (Phi-3's LongRoPE / "su" factors).
_REFUSED_ROPE_TENSORS = ("rope_factors_long.weight", "rope_factors_short.weight")


def build_config(meta: Mapping[str, Any], tensors: Collection[str],
                 rope_freqs: np.ndarray | None = None) -> dict[str, Any]:
    """The ``config.json`` of a GGUF file, from its metadata and tensor names."""
    arch = architecture(meta)
    prefix = str(meta["general.architecture"])
    if vision := sorted(name for name in tensors if name.startswith(VISION_PREFIXES)):
        raise UnsupportedModel(f"GGUF vision tensor {vision[0]!r} ({len(vision)} in all): multimodal files "
                               "are not served (text models are)")

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
        "pad_token_id": meta.get("tokenizer.ggml.padding_token_id"),  # else Phi-3's config says 32000
        "torch_dtype": "float16",
    }
    scaling = get("rope.scaling.type", "none")
    if scaling == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": get("rope.scaling.factor")}
    elif scaling not in ("none", None):
        raise UnsupportedModel(f"GGUF rope scaling {scaling!r} is not served (linear and Llama 3's are)")
    if rope_freqs is not None:
        config["rope_scaling"] = llama3_rope_scaling(rope_freqs, config["rope_theta"], head_dim)
    if (extra := _EXTRA_CONFIG.get(prefix)) is not None:
        extra(get, config, tensors)
    return config


Getter = Callable[..., Any]


def _phi3_config(get: Getter, config: dict[str, Any], tensors: Collection[str]) -> None:
    """Phi-3: partial rotary from ``rope.dimension_count``; LongRoPE ("su") files are refused."""
    if refused := [name for name in _REFUSED_ROPE_TENSORS if name in tensors]:
        raise UnsupportedModel(f"GGUF phi3 file with LongRoPE scaling ({', '.join(refused)}) is not served; "
                               "4k-context Phi-3 files are")
    head_dim = config["hidden_size"] // config["num_attention_heads"]  # what mlx-lm's phi3 uses
    if config["head_dim"] != head_dim:
        raise UnsupportedModel(f"GGUF phi3 head size {config['head_dim']} != embedding / heads ({head_dim})")
    rope_dims = get("rope.dimension_count", head_dim)
    config["partial_rotary_factor"] = rope_dims / head_dim
    config["original_max_position_embeddings"] = get("rope.scaling.original_context_length",
                                                     config["max_position_embeddings"])
    if (window := get("attention.sliding_window")) is not None:
        config["sliding_window"] = window


def _granite_config(get: Getter, config: dict[str, Any], tensors: Collection[str]) -> None:
    """Granite's four multipliers (llama.cpp's defaults: 1, and 1/sqrt(head_dim) for attention)."""
    if config["head_dim"] * config["num_attention_heads"] != config["hidden_size"]:
        raise UnsupportedModel("GGUF granite head size other than embedding / heads is not served")
    config.update({
        "embedding_multiplier": float(get("embedding_scale", 1.0)),
        "residual_multiplier": float(get("residual_scale", 1.0)),
        "attention_multiplier": float(get("attention.scale", config["head_dim"] ** -0.5)),
        "logits_scaling": float(get("logit_scale", 1.0)),
    })


# llama.cpp's Gemma 2 model types by block count (it scales 27B's queries by embedding / heads).
_GEMMA2_27B_LAYERS = 46


def _gemma_common(config: dict[str, Any], large_layers: int) -> dict[str, Any]:
    """Gemma's activation, and its query scale as llama.cpp sets it: 1/sqrt(head_dim), but
    1/sqrt(embedding / heads) for the 27B (told apart by its block count)."""
    scalar = config["head_dim"]
    if config["num_hidden_layers"] == large_layers:
        scalar = config["hidden_size"] // config["num_attention_heads"]
    return {"hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
            "query_pre_attn_scalar": scalar}


def _gemma2_config(get: Getter, config: dict[str, Any], tensors: Collection[str]) -> None:
    """Gemma 2: soft-capping, sliding window; queries scaled by 1/sqrt(head_dim) as llama.cpp does
    (1/sqrt(embedding / heads) for the 46-layer 27B)."""
    if "output.weight" in tensors:
        raise UnsupportedModel("GGUF gemma2 file with an untied output matrix is not served")
    config.update({
        **_gemma_common(config, _GEMMA2_27B_LAYERS),
        "attn_logit_softcapping": float(get("attn_logit_softcapping", 50.0)),
        "final_logit_softcapping": float(get("final_logit_softcapping", 30.0)),
        "tie_word_embeddings": True,
    })
    if (window := get("attention.sliding_window")) is not None:
        config["sliding_window"] = window


# llama.cpp's Gemma 3: every 6th layer global, local layers' rope base 10000 (unscaled); 27B by blocks.
_GEMMA3_SWA_PATTERN, _GEMMA3_LOCAL_ROPE_BASE, _GEMMA3_27B_LAYERS = 6, 10000.0, 62


def _gemma3_config(get: Getter, config: dict[str, Any], tensors: Collection[str]) -> None:
    """Gemma 3 (text): llama.cpp's hard-coded sliding-window pattern and local rope base; queries
    scaled by 1/sqrt(head_dim) (1/sqrt(embedding / heads) for the 62-layer 27B); no soft-capping."""
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if get(key) is not None:
            raise UnsupportedModel(f"GGUF gemma3 file with {key} is not served (mlx-lm's gemma3_text has none)")
    if (window := get("attention.sliding_window")) is None:
        raise UnsupportedModel("GGUF gemma3 file without attention.sliding_window is not served "
                               "(llama.cpp requires it too)")
    config.update({
        **_gemma_common(config, _GEMMA3_27B_LAYERS),
        "sliding_window": int(window),
        "sliding_window_pattern": _GEMMA3_SWA_PATTERN,
        "rope_local_base_freq": _GEMMA3_LOCAL_ROPE_BASE,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    })


_DENSE_FFN = ("ffn_gate", "ffn_up", "ffn_down")


def _qwen3moe_config(get: Getter, config: dict[str, Any], tensors: Collection[str]) -> None:
    """Qwen3-MoE: every layer routed (llama.cpp has no dense layers for it), softmax gating with the
    top-k weights renormalised, as llama.cpp always does; expert size defaults as llama.cpp's."""
    experts, used = get("expert_count"), get("expert_used_count")
    if not experts or not used:
        raise UnsupportedModel("GGUF qwen3moe file without expert_count / expert_used_count is not served")
    if get("expert_weights_scale") not in (None, 0.0, 1.0):
        raise UnsupportedModel("GGUF qwen3moe file with an expert_weights_scale is not served")
    if dense := sorted(n for n in tensors if n.startswith("blk.") and n.split(".")[2] in _DENSE_FFN):
        raise UnsupportedModel(f"GGUF qwen3moe file with a dense feed-forward ({dense[0]!r}) is not served")
    if missing := [i for i in range(config["num_hidden_layers"]) if f"blk.{i}.ffn_gate_inp.weight" not in tensors]:
        raise UnsupportedModel(f"GGUF qwen3moe block {missing[0]} has no router (blk.{missing[0]}.ffn_gate_inp)")
    ffn, expert_ffn = config["intermediate_size"], get("expert_feed_forward_length")
    if not (ffn or expert_ffn):
        raise UnsupportedModel("GGUF qwen3moe file without feed_forward_length nor expert_feed_forward_length")
    config.update({
        "num_experts": int(experts),
        "num_experts_per_tok": int(used),
        "moe_intermediate_size": int(expert_ffn or ffn // used),  # llama.cpp's default
        "intermediate_size": int(ffn or expert_ffn * used),  # unused: no dense layer
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    })


_EXTRA_CONFIG: dict[str, Callable[[Getter, dict[str, Any], Collection[str]], None]] = {
    "phi3": _phi3_config, "granite": _granite_config, "gemma2": _gemma2_config, "gemma3": _gemma3_config,
    "qwen3moe": _qwen3moe_config,
}


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
