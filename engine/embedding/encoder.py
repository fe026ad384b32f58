"""BERT encoder in MLX (mlx-lm has no encoder-only models).

Invariant: attribute names mirror HF ``BertModel`` parameter names, so checkpoints load unrenamed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ..mlx_typed import load_arrays

__all__ = ["BertConfig", "EncoderModel", "load_encoder", "sanitize_bert_weights"]


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    pad_token_id: int = 0
    model_type: str = "bert"

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> "BertConfig":
        model_type = cfg.get("model_type")
        if model_type != "bert":
            raise ValueError(
                f"unsupported encoder model_type {model_type!r}: only 'bert' is supported"
            )
        pos_type = cfg.get("position_embedding_type", "absolute")
        if pos_type != "absolute":
            raise ValueError(
                f"unsupported BERT position_embedding_type {pos_type!r}: only 'absolute'"
            )
        act = cfg.get("hidden_act", "gelu")
        if act not in _ACTIVATIONS:
            raise ValueError(
                f"unsupported BERT hidden_act {act!r}: expected one of {sorted(_ACTIVATIONS)}"
            )
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        if hidden % heads:
            raise ValueError(
                f"hidden_size {hidden} is not divisible by num_attention_heads {heads}"
            )
        return cls(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            num_hidden_layers=int(cfg["num_hidden_layers"]),
            num_attention_heads=heads,
            intermediate_size=int(cfg["intermediate_size"]),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 512)),
            type_vocab_size=int(cfg.get("type_vocab_size", 2)),
            layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
            hidden_act=act,
            pad_token_id=int(cfg.get("pad_token_id") or 0),
            model_type=model_type,
        )


# BERT's "gelu" is the exact erf form; "gelu_new"/"gelu_pytorch_tanh" the tanh form.
_ACTIVATIONS = {
    "gelu": nn.gelu,
    "gelu_new": nn.gelu_approx,
    "gelu_pytorch_tanh": nn.gelu_approx,
    "relu": nn.relu,
}


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def __call__(self, input_ids: mx.array, token_type_ids: mx.array) -> mx.array:
        positions = mx.arange(input_ids.shape[1])
        h = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)[None]
            + self.token_type_embeddings(token_type_ids)
        )
        return self.LayerNorm(h)


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def __call__(self, x: mx.array, mask: mx.array | None) -> mx.array:
        B, L, _ = x.shape

        def heads(t: mx.array) -> mx.array:
            return t.reshape(B, L, self.num_heads, self.head_dim).transpose(0, 2, 1, 3)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale, mask=mask)
        return out.transpose(0, 2, 1, 3).reshape(B, L, -1)


class BertSelfOutput(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def __call__(self, h: mx.array, residual: mx.array) -> mx.array:
        return self.LayerNorm(self.dense(h) + residual)


class BertAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        # Attribute named `self` to match the HF parameter path `attention.self.*`.
        setattr(self, "self", BertSelfAttention(cfg))
        self.output = BertSelfOutput(cfg)

    def __call__(self, x: mx.array, mask: mx.array | None) -> mx.array:
        return self.output(self["self"](x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self._act = _ACTIVATIONS[cfg.hidden_act]

    def __call__(self, x: mx.array) -> mx.array:
        return self._act(self.dense(x))


class BertOutput(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def __call__(self, h: mx.array, residual: mx.array) -> mx.array:
        return self.LayerNorm(self.dense(h) + residual)


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertOutput(cfg)

    def __call__(self, x: mx.array, mask: mx.array | None) -> mx.array:
        a = self.attention(x, mask)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.layer = [BertLayer(cfg) for _ in range(cfg.num_hidden_layers)]

    def __call__(self, x: mx.array, mask: mx.array | None) -> mx.array:
        for layer in self.layer:
            x = layer(x, mask)
        return x


class EncoderModel(nn.Module):
    """BERT encoder: returns the last hidden state ``(B, L, hidden_size)``."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def kernel_bytes(self) -> int:
        """Bytes held beside its parameters (the CPU kernels' packed weights, where installed)."""
        return 0

    def __call__(
        self,
        input_ids: mx.array,
        attention_mask: mx.array | None = None,
        token_type_ids: mx.array | None = None,
    ) -> mx.array:
        """``input_ids`` (B, L) int; ``attention_mask`` (B, L), 1 for real tokens (None: no padding)."""
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be 2-D (batch, length), got shape {input_ids.shape}")
        L = input_ids.shape[1]
        if L > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {L} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}"
            )
        if token_type_ids is None:
            token_type_ids = mx.zeros_like(input_ids)
        h = self.embeddings(input_ids, token_type_ids)
        mask = None
        if attention_mask is not None:
            neg = mx.array(mx.finfo(h.dtype).min, dtype=h.dtype)
            keep = attention_mask.astype(mx.bool_)[:, None, None, :]
            mask = mx.where(keep, mx.array(0, dtype=h.dtype), neg)
        return self.encoder(h, mask)


_IGNORED_PREFIXES = ("pooler.", "cls.", "lm_head.", "classifier.", "qa_outputs.")


def sanitize_bert_weights(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """Map HF BERT checkpoint names onto :class:`EncoderModel` parameter names."""
    out: dict[str, mx.array] = {}
    for name, value in weights.items():
        if name.startswith("bert."):
            name = name[len("bert."):]
        if name.startswith(_IGNORED_PREFIXES) or name.endswith("position_ids"):
            continue
        # Very old TF-converted checkpoints name LayerNorm params gamma/beta.
        if name.endswith("LayerNorm.gamma"):
            name = name[: -len("gamma")] + "weight"
        elif name.endswith("LayerNorm.beta"):
            name = name[: -len("beta")] + "bias"
        out[name] = value
    return out


def load_encoder(model_dir: Path) -> EncoderModel:
    """Load a BERT encoder from a Hugging Face model directory."""
    model_dir = Path(model_dir)
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"no config.json in {model_dir}")
    config = BertConfig.from_dict(json.loads(config_path.read_text()))
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {model_dir}")
    weights: dict[str, mx.array] = {}
    for f in files:
        weights.update(load_arrays(str(f)))
    weights = sanitize_bert_weights(weights)
    model = EncoderModel(config)
    # strict: every encoder parameter must be present, and no unknown tensors.
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    model.eval()
    return model
