"""Last-token pooling for decoder (mlx-lm) embedding models, e.g. Qwen3-Embedding.

Invariant: ids = encode(text, no special tokens) + [terminator]; the vector is the
final-norm hidden state at the last position, L2-normalized.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Sequence

import mlx.core as mx
import numpy as np

from engine.embedding.pooling import EmbeddingModel, EmbeddingResult, l2_normalize, with_instruction

__all__ = ["DecoderEmbeddingModel", "decoder_embed", "embedding_terminator_id"]


def _encode_plain(tokenizer: Any, text: str) -> list[int]:
    """Token ids without special tokens (HF/mlx-lm tokenizer or ``tokenizers.Tokenizer``)."""
    enc = tokenizer.encode(text, add_special_tokens=False)
    if hasattr(enc, "ids"):  # tokenizers.Encoding: drop any configured padding
        return [i for i, m in zip(enc.ids, enc.attention_mask) if m]
    return list(enc)


def embedding_terminator_id(tokenizer: Any, terminator: str) -> int:
    """The token id of the pooling terminator; ValueError if it is not one token."""
    ids = _encode_plain(tokenizer, terminator)
    if len(ids) != 1:
        raise ValueError(
            f"embedding terminator {terminator!r} is not a single token in this "
            f"tokenizer (encodes to {len(ids)} tokens)"
        )
    return int(ids[0])


def decoder_embed(
    model: Any,
    tokenizer: Any,
    text: str,
    terminator_id: int,
    instruction: str | None = None,
) -> EmbeddingResult:
    """Embed one text with a decoder model; ``tokens`` counts the pooling terminator."""
    backbone = getattr(model, "model", None)
    if backbone is None or not callable(backbone):
        raise ValueError(
            f"{type(model).__name__} has no `.model` backbone returning final hidden states"
        )
    ids = _encode_plain(tokenizer, with_instruction(text, instruction)) + [int(terminator_id)]
    hidden = backbone(mx.array([ids], dtype=mx.int32))  # (1, L, H), final norm applied
    last = hidden[0, -1].astype(mx.float32)
    mx.eval(last)
    vec = l2_normalize(np.array(last, dtype=np.float32))
    return EmbeddingResult(vector=vec, tokens=len(ids))


class DecoderEmbeddingModel(EmbeddingModel):
    """Batched last-token pooling over an mlx-lm decoder; right padding is never attended by a
    causal model, so each row's last real position is exact."""

    tokenizer: Any  # mlx-lm's (a Hugging Face tokenizer), not a tokenizers.Tokenizer

    def __init__(self, model: Any, tokenizer: Any, terminator_id: int, *, config: dict[str, Any],
                 max_batch_size: int = 16, max_batch_tokens: int = 8192, name: str = ""):
        self.model, self.tokenizer, self.terminator_id = model, tokenizer, int(terminator_id)
        self.config = config
        self.pooling = "last-token"
        self.max_length = int(config.get("max_position_embeddings") or 4096)
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max(max_batch_tokens, self.max_length)
        self.name = name
        self._lock = threading.Lock()

    @classmethod
    def load(cls, model_dir: Path, *, terminator: str | None = None, dtype: str = "auto",
             **kwargs: Any) -> "DecoderEmbeddingModel":
        from engine.hardware.device import runtime_dtype
        from engine.mlx_typed import load_lm

        model, tokenizer = load_lm(str(model_dir))
        target = runtime_dtype(dtype)
        if target is not None:
            model.set_dtype(target)
        if getattr(model, "model", None) is None:
            raise ValueError(f"{type(model).__name__} has no `.model` backbone to pool")
        terminator = terminator or tokenizer.eos_token
        if not terminator:
            raise ValueError("the tokenizer has no eos token to use as the pooling terminator")
        config = json.loads((Path(model_dir) / "config.json").read_text())
        return cls(model, tokenizer, embedding_terminator_id(tokenizer, terminator), config=config,
                   name=Path(model_dir).name, **kwargs)

    @property
    def hidden_size(self) -> int:
        return int(self.config["hidden_size"])

    @property
    def vocab_size(self) -> int:
        return int(self.config["vocab_size"])

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", "decoder"))

    def _encode(self, texts: Sequence[str], instruction: str | None) -> list[list[int]]:
        return self.encode(texts, instruction)[0]

    def encode(self, texts: Sequence[str], instruction: str | None = None) -> tuple[list[list[int]], list[int]]:
        room = self.max_length - 1
        plain = [_encode_plain(self.tokenizer, with_instruction(t, instruction)) for t in texts]
        return [ids[:room] + [self.terminator_id] for ids in plain], [i for i, ids in enumerate(plain)
                                                                      if len(ids) > room]

    def _forward(self, ids_list: list[list[int]]) -> np.ndarray:
        longest = max(len(ids) for ids in ids_list)
        padded = [ids + [self.terminator_id] * (longest - len(ids)) for ids in ids_list]
        last = mx.array([len(ids) - 1 for ids in ids_list])
        with self._lock:
            hidden = self.model.model(mx.array(padded, dtype=mx.int32))  # (B, L, H), final norm
            pooled = hidden[mx.arange(len(ids_list)), last].astype(mx.float32)
            mx.eval(pooled)
            return np.array(pooled, dtype=np.float32)

    def tokenize(self, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return ids, self.tokenizer.convert_ids_to_tokens(ids)

    def detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
