"""What differs per architecture, computed once at load: the single home for it.

Loading, memory, the facade, the scheduler and speculation read these facts here and
never from the config or the module tree themselves, so a new architecture (a GGUF
family, a vision model) is taught in one place. ``config_value`` is the one reader of
a config, top level first, then ``text_config`` (multimodal nesting).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import mlx.nn as nn
from mlx_lm.models.cache import KVCache, make_prompt_cache

from ..layering import layers_of

FUSED_FAMILIES = ("llama", "qwen2", "qwen3")  # mlx-lm modules whose Attention, MLP and blocks the kernels fuse
_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "n_positions")


def config_value(config: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    """The first of ``keys`` set in ``config`` or, failing that, its ``text_config``."""
    scopes = [config]
    if isinstance(text := config.get("text_config"), Mapping):
        scopes.append(text)
    for scope in scopes:
        for key in keys:
            if (value := scope.get(key)) is not None:
                return value
    return default


def can_roll_back(model: nn.Module) -> bool:
    """Whether rows of this model can drop computed positions: every layer keeps a
    plain KV cache (sliding windows and recurrent state cannot be rolled back)."""
    return all(type(c) is KVCache for c in make_prompt_cache(model))


def family(module: nn.Module) -> str | None:
    """The mlx-lm model module a module's original class comes from (``llama``, ...)."""
    name = layers_of(module)[0].__module__
    return name.rpartition(".")[2] if name.startswith("mlx_lm.models.") else None


def rope_kind(module: nn.Module) -> str | None:
    """``rope`` (mlx's plain RoPE), ``llama3`` (mlx-lm's Llama3RoPE), or None for any
    other module, other RoPE variants included."""
    cls = layers_of(module)[0]
    if cls is nn.RoPE:
        return "rope"
    if (cls.__module__, cls.__name__) == ("mlx_lm.models.rope_utils", "Llama3RoPE"):
        return "llama3"
    return None


def decoder_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated decoder blocks, in order (what adapters count and checkpoints wrap)."""
    return list(getattr(model, "layers", ()))


@dataclass(frozen=True)
class ModelTraits:
    model_type: str
    context_length: int  # positions the model was trained for
    vocab_size: int  # rows of the output projection (may exceed the tokenizer's)
    can_roll_back: bool  # speculation needs it
    bos_token: str | None  # the tokenizer's BOS; a text prompt that starts with it gets no second one
    family: str | None  # the mlx-lm model module of its blocks
    blocks: int  # decoder blocks
    fusable: bool  # the CPU kernels fuse its blocks (FUSED_FAMILIES)
    rope: str | None  # rope_kind of its first positional encoding (None: no kernel for it, or none)
    media: tuple[str, ...] = ()  # inputs other than text the model takes (none served yet)

    def adds_bos(self, text: str) -> bool:
        """Whether encoding ``text`` should add the tokenizer's special tokens."""
        return self.bos_token is None or not text.startswith(self.bos_token)


def traits_of(model: nn.Module, tokenizer: Any, config: Mapping[str, Any]) -> ModelTraits:
    blocks = decoder_blocks(model)
    kind = family(blocks[0]) if blocks else None
    ropes = [rope_kind(m) for _, m in model.named_modules() if "rope" in type(m).__name__.lower()]
    context = config_value(config, *_CONTEXT_KEYS) or getattr(tokenizer, "model_max_length", 0) or 4096
    return ModelTraits(
        model_type=str(config.get("model_type", "unknown")),
        context_length=int(context),
        vocab_size=int(config_value(config, "vocab_size") or len(tokenizer)),
        can_roll_back=can_roll_back(model),
        bos_token=getattr(tokenizer, "bos_token", None),
        family=kind,
        blocks=len(blocks),
        fusable=kind in FUSED_FAMILIES,
        rope=ropes[0] if ropes else None,
    )
