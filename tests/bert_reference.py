"""A BERT sequence classifier (``*ForSequenceClassification``) written out in numpy from the
checkpoint and tokenizer.json: the reference the reranker and classifier tests compare against.

Invariant: nothing here imports the engine; one sequence at a time, unpadded, in float64.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Encoding, Tokenizer

_erf = np.vectorize(math.erf)


def tokenizer(model_dir: Path) -> Tokenizer:
    config = json.loads((Path(model_dir) / "config.json").read_text())
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=config["max_position_embeddings"])
    return tok


def logits(model_dir: Path, encodings: list[Encoding]) -> list[np.ndarray]:
    """Each encoding's classifier logits: pooler tanh(dense([CLS])), then the classifier."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    w = {k: v.astype(np.float64) for k, v in load_file(str(Path(model_dir) / "model.safetensors")).items()}
    heads, eps = config["num_attention_heads"], config["layer_norm_eps"]

    def norm(x, p):
        m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    out = []
    for enc in encodings:
        ids, types, n = np.array(enc.ids), np.array(enc.type_ids), len(enc.ids)
        h = (w["bert.embeddings.word_embeddings.weight"][ids] + w["bert.embeddings.position_embeddings.weight"][:n]
             + w["bert.embeddings.token_type_embeddings.weight"][types])
        h = norm(h, "bert.embeddings.LayerNorm")
        for i in range(config["num_hidden_layers"]):
            p = f"bert.encoder.layer.{i}."
            q, k, v = (lin(h, p + f"attention.self.{name}").reshape(n, heads, -1).transpose(1, 0, 2)
                       for name in ("query", "key", "value"))
            att = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
            att = np.exp(att - att.max(-1, keepdims=True))
            ctx = (att / att.sum(-1, keepdims=True) @ v).transpose(1, 0, 2).reshape(n, -1)
            h = norm(h + lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            inter = lin(h, p + "intermediate.dense")
            h = norm(h + lin(0.5 * inter * (1 + _erf(inter / math.sqrt(2))), p + "output.dense"), p + "output.LayerNorm")
        out.append(lin(np.tanh(lin(h[0], "bert.pooler.dense")), "classifier"))
    return out
