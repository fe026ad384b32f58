"""The architectures a GGUF file may name: those gguf-py and mlx-lm both know.

Invariants: a file's ``general.architecture`` is served when gguf-py has it (``MODEL_ARCH_NAMES``),
mlx-lm has a model module for it (the same name, or the one ``_MLX_MODULE`` names) and it is not
``REFUSED``; anything else raises ``UnsupportedModel`` before any weight is converted. Tensor names
and config are derived elsewhere (gguf_names, gguf_config); the hand facts here are only what
llama.cpp's converter did to the weights beyond renaming them, so that it is undone: q/k rows
permuted for its rope (``PERMUTED_QK``), norms written as weight + 1 (``NORM_SHIFT``).
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..errors import UnsupportedModel

__all__ = ["REFUSED", "TESTED", "VISION_PREFIXES", "Architecture", "architecture", "permute_qk",
           "served_architectures", "unpermute_qk"]

# gguf-py's name -> mlx-lm's module, where the two spell it differently.
_MLX_MODULE = {
    "qwen3moe": "qwen3_moe", "qwen2moe": "qwen2_moe", "gemma3": "gemma3_text", "command-r": "cohere",
    "deepseek2": "deepseek_v2", "glm4moe": "glm4_moe", "gpt-oss": "gpt_oss", "gptneox": "gpt_neox",
    "phi2": "phi", "starcoder": "gpt_bigcode", "ernie4_5-moe": "ernie4_5_moe", "hunyuan-dense": "hunyuan_v1_dense",
    "exaone-moe": "exaone_moe", "lfm2moe": "lfm2_moe", "granitehybrid": "granitemoehybrid",
}
# Hugging Face class names that do not follow ``<ModelType>ForCausalLM`` (config.json's "architectures").
_HF_CLASS = {"llama": "LlamaForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM", "gemma3": "Gemma3ForCausalLM",
             "stablelm": "StableLmForCausalLM"}

# llama.cpp's converter permuted q/k rows for its rope (LlamaModel, its subclasses, and the models
# that call LlamaModel.permute).
PERMUTED_QK = frozenset({"llama", "granite", "granitemoe", "smollm3", "arcee", "apertus", "olmo", "minicpm",
                         "deci", "baichuan"})
# llama.cpp's converter wrote every norm weight as weight + 1 (Gemma's RMSNorm computes with 1 + w).
NORM_SHIFT = {"gemma": 1.0, "gemma2": 1.0, "gemma3": 1.0}
# Known to both sides, but their files hold what this converter does not undo.
_RECURRENT = "recurrent layers whose state tensors llama.cpp's converter rewrites"
REFUSED = {
    **dict.fromkeys(("mamba", "mamba2", "jamba", "rwkv7", "nemotron_h", "plamo2", "lfm2", "lfm2moe", "falcon-h1",
                     "granitehybrid", "qwen3next", "qwen35", "qwen35moe", "kimi-linear"), _RECURRENT),
    "gemma3n": "per-layer inputs and AltUp tensors the converter reshapes",
    "gemma4": "per-layer inputs the converter reshapes",
    "gpt2": "Conv1D weights llama.cpp's converter transposes",
    "bitnet": "ternary weights the converter rescales",
    "nemotron": "layer norms written as weight + 1 (not undone here)",
    "internlm2": "q/k/v split out of the fused wqkv mlx-lm holds, q/k permuted",
    "olmo": "mlx-lm's olmo module needs the hf_olmo package and its own tensor layout",
}
# Checked token for token against mlx-lm on their Hugging Face fixtures (tests/test_gguf_archs*.py).
TESTED = ("llama", "qwen2", "qwen3", "phi3", "granite", "gemma2", "gemma3", "qwen3moe", "olmo2", "starcoder2",
          "exaone")

# Multimodal files' vision/projector tensors (llama.cpp's mmproj names): refused, text only is served.
VISION_PREFIXES = ("v.", "mm.")


@dataclass(frozen=True)
class Architecture:
    name: str  # general.architecture (gguf-py's MODEL_ARCH_NAMES)
    model_type: str  # mlx-lm's module (mlx_lm.models.<model_type>)
    hf_class: str
    permuted_qk: bool  # llama.cpp's converter permuted the q/k rows for its rope
    norm_shift: float = 0.0  # llama.cpp added this to every norm weight (Gemma: 1)

    @property
    def tested(self) -> bool:
        return self.name in TESTED


def _mlx_module(name: str) -> str:
    return _MLX_MODULE.get(name, name)


def _has_mlx_module(module: str) -> bool:
    try:
        return importlib.util.find_spec(f"mlx_lm.models.{module}") is not None
    except (ImportError, ValueError):
        return False


@functools.lru_cache(maxsize=1)
def served_architectures() -> tuple[str, ...]:
    """Every served ``general.architecture``: the tested ones first, then the others by name."""
    import gguf

    both = {name for name in gguf.MODEL_ARCH_NAMES.values()
            if name not in REFUSED and _has_mlx_module(_mlx_module(name))}
    return (*[name for name in TESTED if name in both], *sorted(both.difference(TESTED)))


def architecture(meta: Mapping[str, Any]) -> Architecture:
    arch = str(meta.get("general.architecture", ""))
    if arch in REFUSED:
        raise UnsupportedModel(f"GGUF architecture {arch!r} is not served ({REFUSED[arch]}); "
                               f"served: {', '.join(served_architectures())}")
    if arch not in served_architectures():
        raise UnsupportedModel(f"GGUF architecture {arch!r} is not served (gguf and mlx-lm do not both know it); "
                               f"served: {', '.join(served_architectures())}")
    module = _mlx_module(arch)
    hf_class = _HF_CLASS.get(arch) or "".join(p.capitalize() for p in module.split("_")) + "ForCausalLM"
    return Architecture(arch, module, hf_class, arch in PERMUTED_QK, NORM_SHIFT.get(arch, 0.0))


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
