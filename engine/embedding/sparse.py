"""A SPLADE sparse encoder: a BERT ``*ForMaskedLM`` checkpoint whose masked-language-model head
weighs every vocabulary entry for a text.

Invariants: a row's weight for vocabulary id v is the max over the input's real tokens of
log(1 + relu(logit[t, v])); padding never counts. The max is taken over the logits first (the
same value: log1p(relu(x)) never decreases in x), and the head runs on a few rows at a time so
that at most ``LOGIT_BUDGET`` logits exist at once; only the pooled (B, vocab) weights leave MLX.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from tokenizers import Tokenizer

from ..errors import UnsupportedModel
from ..mlx_typed import load_arrays
from .encoder import _ACTIVATIONS, load_encoder
from .folder import trained_length
from .pooling import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, EmbeddingModel

ARCHITECTURE = "ForMaskedLM"
LOGIT_BUDGET = 1 << 24  # logits (float32) one head pass holds at most, beyond a single row's
_HEAD = "cls.predictions."


def is_masked_lm(config: dict) -> bool:
    return any(str(a).endswith(ARCHITECTURE) for a in config.get("architectures") or ())


def nonzero_weights(row: np.ndarray, top_k: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One row's nonzero entries: vocabulary ids ascending (int32) and their weights (float32);
    with ``top_k``, only the k heaviest (ties: the lower id) are kept, still ascending by id."""
    ids = np.flatnonzero(row > 0)
    if top_k and len(ids) > top_k:
        ids = np.sort(ids[np.lexsort((ids, -row[ids]))[:top_k]])
    return ids.astype(np.int32), row[ids].astype(np.float32)


class MaskedLMHead(nn.Module):
    """HF's BertOnlyMLMHead: the transform (dense, activation, LayerNorm), then the decoder's one
    logit per vocabulary entry."""

    def __init__(self, hidden: int, vocab: int, activation: str, eps: float):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.decoder = nn.Linear(hidden, vocab)
        self._act = _ACTIVATIONS[activation]

    def __call__(self, h: mx.array) -> mx.array:
        return self.decoder(self.norm(self._act(self.dense(h))))


def head_weights(weights: dict[str, mx.array], name: str) -> list[tuple[str, mx.array]]:
    """The head's parameters under MaskedLMHead's names; a decoder without weights of its own is
    tied to the word embeddings, its bias is ``cls.predictions.bias`` (or the decoder's)."""

    def first(*keys: str) -> mx.array:
        for key in keys:
            if key in weights:
                return weights[key]
        raise UnsupportedModel(f"{name}: the masked-language-model head has no {keys[0]!r}")

    t = _HEAD + "transform."
    return [("dense.weight", first(t + "dense.weight")), ("dense.bias", first(t + "dense.bias")),
            ("norm.weight", first(t + "LayerNorm.weight", t + "LayerNorm.gamma")),
            ("norm.bias", first(t + "LayerNorm.bias", t + "LayerNorm.beta")),
            ("decoder.weight", first(_HEAD + "decoder.weight", "bert.embeddings.word_embeddings.weight",
                                     "embeddings.word_embeddings.weight")),
            ("decoder.bias", first(_HEAD + "bias", _HEAD + "decoder.bias"))]


class SparseEncoder(EmbeddingModel):
    """Its rows' "vectors" are SPLADE weights, one per vocabulary entry (``hidden_size`` is the
    vocabulary size); ``nonzero_weights`` turns one into the sparse form."""

    sparse = True

    def __init__(self, encoder, tokenizer: Tokenizer, head: MaskedLMHead, **kwargs):
        super().__init__(encoder, tokenizer, pooling="cls", **kwargs)
        self.head = head

    @classmethod
    def load(cls, model_dir: Path, *, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
             max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, max_length: int | None = None) -> "SparseEncoder":
        model_dir = Path(model_dir)
        weights: dict[str, mx.array] = {}
        for f in sorted(model_dir.glob("*.safetensors")):
            weights.update(load_arrays(str(f)))
        encoder = load_encoder(model_dir)
        cfg = encoder.config
        head = MaskedLMHead(cfg.hidden_size, cfg.vocab_size, cfg.hidden_act, cfg.layer_norm_eps)
        head.load_weights(head_weights(weights, model_dir.name), strict=True)
        head.set_dtype(mx.float32)
        mx.eval(head.parameters())
        return cls(encoder, Tokenizer.from_file(str(model_dir / "tokenizer.json")), head,
                   max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens,
                   max_length=max_length or trained_length(model_dir, cfg.max_position_embeddings),
                   name=model_dir.name)

    @property
    def hidden_size(self) -> int:
        return self.vocab_size

    def _forward(self, ids_list: list[list[int]]) -> np.ndarray:
        """Each row's SPLADE weights, shape (B, vocab)."""
        L = max(len(ids) for ids in ids_list)
        ids = np.full((len(ids_list), L), self._pad_id, dtype=np.int32)
        mask = np.zeros((len(ids_list), L), dtype=np.int32)
        for r, row in enumerate(ids_list):
            ids[r, :len(row)] = row
            mask[r, :len(row)] = 1
        step = max(1, LOGIT_BUDGET // (L * self.vocab_size))
        with self._lock:
            attn = mx.array(mask)
            h = self.encoder(mx.array(ids), attn).astype(mx.float32)
            mx.eval(h)
            keep = attn.astype(mx.bool_)[:, :, None]
            pooled = []
            for start in range(0, len(ids_list), step):
                logits = self.head(h[start:start + step])  # (rows, L, vocab)
                top = mx.where(keep[start:start + step], logits, -mx.inf).max(axis=1)
                pooled.append(mx.log1p(mx.maximum(top, 0.0)))
                mx.eval(pooled[-1])
            return np.array(mx.concatenate(pooled), dtype=np.float32)
