"""Last-token pooling for decoder (mlx-lm) embedding models, e.g. Qwen3-Embedding.

Matches the seed's embeddings/text.ts: ids = encode(text, no special tokens) +
[terminator]; the vector is the final-norm hidden state at the last position,
L2-normalized. For mlx-lm llama/qwen3 models ``model.model(inputs)`` returns
``self.norm(h)``, i.e. the final normed hidden states (before ``lm_head``).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from engine.embeddings import EmbeddingResult, l2_normalize, with_instruction

__all__ = ["decoder_embed", "embedding_terminator_id"]


def _encode_plain(tokenizer: Any, text: str) -> list[int]:
    """Token ids without special tokens, for an HF/mlx-lm tokenizer or a
    ``tokenizers.Tokenizer``."""
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
    """Embed one text with a decoder model: last-token final-norm hidden state,
    L2-normalized. ``tokens`` counts the pooling terminator."""
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
