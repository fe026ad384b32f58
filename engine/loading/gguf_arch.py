"""The architectures a GGUF file may name, and how their tensors map onto mlx-lm's.

Invariants: an unknown architecture or tensor raises ``UnsupportedModel`` before any
weight is converted; every transform llama.cpp's converter applied to a tensor (q/k row
permutation, Gemma's norm + 1) is undone here, so the result is the Hugging Face weight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..errors import UnsupportedModel

__all__ = ["ARCHITECTURES", "VISION_PREFIXES", "Architecture", "architecture", "hf_name", "permute_qk", "unpermute_qk"]

# GGUF tensor name (inside "blk.N.") -> Hugging Face name (inside "model.layers.N."), llama's layout.
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


@dataclass(frozen=True)
class Architecture:
    model_type: str  # mlx-lm's module (mlx_lm.models.<model_type>)
    hf_class: str
    permuted_qk: bool  # llama.cpp's converter permuted the q/k rows for its rope
    attention_bias: bool = False
    qk_norm: bool = False
    layer_tensors: Mapping[str, str] = field(default_factory=dict)  # replaces/extends llama's names
    norm_shift: float = 0.0  # llama.cpp added this to every norm weight (Gemma: 1)

    def layer_name(self, kind: str) -> str | None:
        return self.layer_tensors.get(kind, _LAYER_TENSORS.get(kind))


_GEMMA_NORMS = {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
                "post_ffw_norm": "post_feedforward_layernorm"}
# Multimodal files' vision/projector tensors (llama.cpp's mmproj names): refused, text only is served.
VISION_PREFIXES = ("v.", "mm.")

# general.architecture -> the mlx-lm model. Mistral, SmolLM and Llama 3 files say "llama".
ARCHITECTURES = {
    "llama": Architecture("llama", "LlamaForCausalLM", permuted_qk=True),
    "qwen2": Architecture("qwen2", "Qwen2ForCausalLM", permuted_qk=False, attention_bias=True),
    "qwen3": Architecture("qwen3", "Qwen3ForCausalLM", permuted_qk=False, qk_norm=True),
    # Phi-3: q/k/v in one matrix, gate and up stacked in ffn_up (gate first), no permutation.
    "phi3": Architecture("phi3", "Phi3ForCausalLM", permuted_qk=False, layer_tensors={
        "attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}),
    # Granite: llama's layout (its converter subclasses LlamaModel, so q/k are permuted).
    "granite": Architecture("granite", "GraniteForCausalLM", permuted_qk=True),
    # Gemma 2: four norms per block, each written as HF weight + 1.
    "gemma2": Architecture("gemma2", "Gemma2ForCausalLM", permuted_qk=False, norm_shift=1.0,
                           layer_tensors=_GEMMA_NORMS),
    # Gemma 3 (text): Gemma 2's norms plus q/k norms, every one of them written as HF weight + 1.
    "gemma3": Architecture("gemma3_text", "Gemma3ForCausalLM", permuted_qk=False, qk_norm=True, norm_shift=1.0,
                           layer_tensors=_GEMMA_NORMS),
    # Qwen3-MoE: Qwen3's attention; experts stacked [n_expert, ...] as mlx-lm's SwitchGLU holds them.
    "qwen3moe": Architecture("qwen3_moe", "Qwen3MoeForCausalLM", permuted_qk=False, qk_norm=True, layer_tensors={
        "ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
        "ffn_up_exps": "mlp.switch_mlp.up_proj", "ffn_down_exps": "mlp.switch_mlp.down_proj"}),
}


def architecture(meta: Mapping[str, Any]) -> Architecture:
    arch = str(meta.get("general.architecture", ""))
    if arch not in ARCHITECTURES:
        raise UnsupportedModel(f"GGUF architecture {arch!r} is not served; served: {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


def hf_name(base: str, arch: str = "llama") -> str:
    """Hugging Face tensor name (without ``.weight``) for a GGUF tensor base name of ``arch``."""
    if base.startswith(VISION_PREFIXES):
        raise UnsupportedModel(f"GGUF vision tensor {base!r}: multimodal files are not served (text models are)")
    if base in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[base]
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and (name := ARCHITECTURES[arch].layer_name(parts[2])):
        return f"model.layers.{parts[1]}.{name}"
    raise UnsupportedModel(f"GGUF tensor {base!r} is not part of a {arch} model this server knows")


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
