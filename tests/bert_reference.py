"""A BERT sequence classifier (``*ForSequenceClassification``) and a SPLADE model (``*ForMaskedLM``)
written out in numpy from the checkpoint and tokenizer.json: the reference the reranker,
classifier and sparse embedding tests compare against.

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
    w, hidden = _weights(model_dir), hidden_states(model_dir, encodings)
    return [_lin(w, np.tanh(_lin(w, h[0], "bert.pooler.dense")), "classifier") for h in hidden]


def splade(model_dir: Path, encodings: list[Encoding]) -> list[np.ndarray]:
    """Each encoding's SPLADE weights over the vocabulary: the masked-language-model head's
    (transform, then the decoder, tied to the word embeddings where the checkpoint has no
    decoder weights) log(1 + relu(logit)), the max over the tokens."""
    config, w = json.loads((Path(model_dir) / "config.json").read_text()), _weights(model_dir)
    decoder = w.get("cls.predictions.decoder.weight", w["bert.embeddings.word_embeddings.weight"])
    bias = w.get("cls.predictions.bias", w.get("cls.predictions.decoder.bias"))
    out = []
    for h in hidden_states(model_dir, encodings):
        t = _gelu(_lin(w, h, "cls.predictions.transform.dense"))
        t = _norm(w, t, "cls.predictions.transform.LayerNorm", config["layer_norm_eps"])
        out.append(np.log1p(np.maximum(t @ decoder.T + bias, 0)).max(axis=0))
    return out


def hidden_states(model_dir: Path, encodings: list[Encoding]) -> list[np.ndarray]:
    """Each encoding's last hidden states, shape (tokens, hidden)."""
    config, w = json.loads((Path(model_dir) / "config.json").read_text()), _weights(model_dir)
    heads, eps = config["num_attention_heads"], config["layer_norm_eps"]
    out = []
    for enc in encodings:
        ids, types, n = np.array(enc.ids), np.array(enc.type_ids), len(enc.ids)
        h = (w["bert.embeddings.word_embeddings.weight"][ids] + w["bert.embeddings.position_embeddings.weight"][:n]
             + w["bert.embeddings.token_type_embeddings.weight"][types])
        h = _norm(w, h, "bert.embeddings.LayerNorm", eps)
        for i in range(config["num_hidden_layers"]):
            p = f"bert.encoder.layer.{i}."
            q, k, v = (_lin(w, h, p + f"attention.self.{name}").reshape(n, heads, -1).transpose(1, 0, 2)
                       for name in ("query", "key", "value"))
            att = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
            att = np.exp(att - att.max(-1, keepdims=True))
            ctx = (att / att.sum(-1, keepdims=True) @ v).transpose(1, 0, 2).reshape(n, -1)
            h = _norm(w, h + _lin(w, ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm", eps)
            inter = _lin(w, h, p + "intermediate.dense")
            h = _norm(w, h + _lin(w, _gelu(inter), p + "output.dense"), p + "output.LayerNorm", eps)
        out.append(h)
    return out


def _weights(model_dir: Path) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in load_file(str(Path(model_dir) / "model.safetensors")).items()}


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _norm(w: dict, x: np.ndarray, p: str, eps: float) -> np.ndarray:
    m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w[p + ".weight"] + w[p + ".bias"]


def _lin(w: dict, x: np.ndarray, p: str) -> np.ndarray:
    return x @ w[p + ".weight"].T + w[p + ".bias"]
