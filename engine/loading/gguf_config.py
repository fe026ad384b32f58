"""A GGUF file's metadata in Hugging Face terms: the ``config.json`` mlx-lm reads.

Invariants: the config is built from gguf-py's metadata keys (``gguf.Keys``) generically and
then fitted to the fields of mlx-lm's ``ModelArgs`` for the architecture (a field named
otherwise, e.g. ``num_layers`` or ``norm_epsilon``, gets its synonym's value); per-architecture
code only adds what llama.cpp hard-codes. A required field left unset, a partial rotary the model
cannot take, or a key that changes the numerics and was not carried over (``_NUMERIC_KEYS``,
unless at its neutral value) raises ``UnsupportedModel`` before any weight is converted;
defaults are llama.cpp's own where the file omits a key.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Collection, Mapping

import numpy as np

from ..errors import UnsupportedModel
from .gguf_arch import VISION_PREFIXES, Architecture, architecture, permute_qk, unpermute_qk

__all__ = ["Architecture", "architecture", "build_config", "permute_qk", "unpermute_qk"]


# Tensors that are folded into the config instead of the weights.
CONFIG_TENSORS = frozenset({"rope_freqs.weight"})
# Tensors of rope variants that are refused, by name (Phi-3's LongRoPE / "su" factors).
_REFUSED_ROPE_TENSORS = ("rope_factors_long.weight", "rope_factors_short.weight")

# Hugging Face config names mlx-lm's ModelArgs use for one value, the canonical name first.
_SYNONYMS = {
    "num_hidden_layers": ("num_layers", "n_layer", "n_layers"),
    "rms_norm_eps": ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon", "norm_eps"),
    "attention_bias": ("use_qkv_bias",),
    "num_attention_heads": ("n_head", "n_heads"),
    "num_key_value_heads": ("n_kv_heads", "num_kv_heads"),
    "hidden_size": ("n_embd", "d_model", "dim"),
    "max_position_embeddings": ("n_positions", "max_seq_len"),
}
_EXPERT_FIELDS = {"expert_count": ("num_experts", "num_local_experts", "n_routed_experts"),
                  "expert_used_count": ("num_experts_per_tok",),
                  "expert_feed_forward_length": ("moe_intermediate_size",)}
# Keys (after "<arch>.") that change what a model computes, with their neutral value (None: any
# value changes it). Present, not read while building the config and not neutral: refused.
_NUMERIC_KEYS = {
    "logit_scale": 1.0, "embedding_scale": 1.0, "residual_scale": 1.0, "attention.scale": None,
    "attention.output_scale": None, "attn_logit_softcapping": None, "final_logit_softcapping": None,
    "router_logit_softcapping": None, "use_parallel_residual": False, "attention.clamp_kqv": None,
    "attention.max_alibi_bias": 0.0, "attention.causal": True, "attention.sliding_window": None,
    "attention.sliding_window_pattern": None, "attention.temperature_scale": None,
    "attention.temperature_length": None, "attention.shared_kv_layers": None, "swin_norm": False,
    "expert_weights_scale": 1.0, "expert_weights_norm": None, "expert_gating_func": None,
    "expert_shared_count": 0, "leading_dense_block_count": 0, "moe_every_n_layers": None,
    "interleave_moe_layer_step": None, "nextn_predict_layers": 0, "activation_sparsity_scale": None,
    "swiglu_clamp_exp": None, "swiglu_clamp_shexp": None, "full_attention_interval": None,
    "rope.freq_base_swa": None, "rope.dimension_count_swa": None, "rope.dimension_sections": None,
    "attention.key_length_swa": None, "attention.value_length_swa": None, "attention.q_lora_rank": None,
    "attention.kv_lora_rank": None, "expert_count": 0, "expert_used_count": 0,
}


def model_args(model_type: str) -> dict[str, dataclasses.Field]:
    """The fields of mlx-lm's ``ModelArgs`` for ``model_type``."""
    from mlx_lm.utils import _get_classes

    try:
        _, args_class = _get_classes({"model_type": model_type})
    except Exception as exc:
        raise UnsupportedModel(f"mlx-lm's {model_type!r} model cannot be imported: {exc}") from exc
    return {f.name: f for f in dataclasses.fields(args_class)}


def build_config(meta: Mapping[str, Any], tensors: Collection[str],
                 rope_freqs: np.ndarray | None = None) -> dict[str, Any]:
    """The ``config.json`` of a GGUF file, from its metadata and tensor names."""
    arch = architecture(meta)
    prefix = arch.name
    if vision := sorted(name for name in tensors if name.startswith(VISION_PREFIXES)):
        raise UnsupportedModel(f"GGUF vision tensor {vision[0]!r} ({len(vision)} in all): multimodal files "
                               "are not served (text models are)")
    read: set[str] = set()

    def get(key: str, default: Any = None) -> Any:
        read.add(key)
        return meta.get(f"{prefix}.{key}", default)

    hidden, heads = get("embedding_length"), get("attention.head_count")
    for key, value in (("embedding_length", hidden), ("attention.head_count", heads),
                       ("block_count", get("block_count"))):
        if not isinstance(value, int) or value <= 0:
            raise UnsupportedModel(f"GGUF {prefix}.{key} is {value!r}; one positive count is served "
                                   "(per-layer head counts are not)")
    head_dim = get("attention.key_length", hidden // heads)
    if get("attention.value_length", head_dim) != head_dim:
        raise UnsupportedModel(f"GGUF {prefix} file with value_length {get('attention.value_length')} != "
                               f"key_length {head_dim} is not served")
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
        "rms_norm_eps": get("attention.layer_norm_rms_epsilon", get("attention.layer_norm_epsilon")),
        "rope_theta": get("rope.freq_base", 10000.0),
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": _has_bias(tensors, ("attn_q", "attn_qkv")),
        "mlp_bias": _has_bias(tensors, ("ffn_down",)),
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
    _fit_model_args(get, config, prefix)
    _refuse_unread(meta, prefix, read)
    return config


def _has_bias(tensors: Collection[str], kinds: tuple[str, ...]) -> bool:
    return any(f"blk.0.{kind}.bias" in tensors for kind in kinds)


def _fit_model_args(get: Getter, config: dict[str, Any], prefix: str) -> None:
    """Fill the fields mlx-lm's ModelArgs names otherwise, carry the keys it has a field for,
    refuse what it cannot compute; every required field must be set."""
    fields = model_args(config["model_type"])
    for canonical, synonyms in _SYNONYMS.items():
        for name in synonyms:
            if name in fields and name not in config and config.get(canonical) is not None:
                config[name] = config[canonical]
    if "use_parallel_residual" in fields and get("use_parallel_residual") is not None:
        config["use_parallel_residual"] = bool(get("use_parallel_residual"))
    for key, names in _EXPERT_FIELDS.items():  # an MoE model's sizes, where its ModelArgs has a field
        if (expert := next((n for n in names if n in fields), None)) and expert not in config and get(key) is not None:
            config[expert] = int(get(key))
    if "partial_rotary_factor" not in config and (dims := get("rope.dimension_count")) is not None:
        head_dim = config["head_dim"]
        if dims != head_dim:
            if "partial_rotary_factor" not in fields:
                raise UnsupportedModel(f"GGUF {prefix} file rotating {dims} of {head_dim} head dimensions is not "
                                       f"served (mlx-lm's {config['model_type']!r} rotates them all)")
            config["partial_rotary_factor"] = dims / head_dim
        elif "partial_rotary_factor" in fields:
            config["partial_rotary_factor"] = 1.0
    required = [f.name for f in fields.values() if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    if missing := [name for name in required if config.get(name) is None]:
        raise UnsupportedModel(f"GGUF {prefix} file: mlx-lm's {config['model_type']!r} model needs "
                               f"{', '.join(missing)}, which its metadata does not give")


def _refuse_unread(meta: Mapping[str, Any], prefix: str, read: set[str]) -> None:
    for key, neutral in _NUMERIC_KEYS.items():
        value = meta.get(f"{prefix}.{key}")
        if value is None or key in read or (neutral is not None and value == neutral):
            continue
        raise UnsupportedModel(f"GGUF {prefix}.{key} = {value!r} changes what the model computes and is not "
                               f"carried into mlx-lm's {prefix} model; this file is not served")


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
