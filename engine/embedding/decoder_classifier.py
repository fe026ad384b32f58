"""A decoder (mlx-lm) sequence classifier: ``*ForSequenceClassification`` checkpoints
(Qwen2/Qwen3/Llama style: the backbone and ``score``, one row per label, no bias), and
decoder rerankers that answer "yes" or "no" (Qwen3-Reranker style), named by vLLM's
``classifier_from_token: ["no", "yes"]`` in config.json: one label whose logit is
logit(yes) - logit(no), so its sigmoid is the softmax probability of "yes".

Invariants: a text is encoded with the tokenizer's own special tokens and pooled at its
last token (right padding is never attended by a causal model); a reranker's pair is the
query's text followed by the document's, as given: the caller writes the model's prompt
template into them. Scores follow ``classifier.score_function``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import mlx.core as mx
import numpy as np

from ..errors import UnsupportedModel
from .classifier import SIGMOID, label_names, label_scores, score_function
from .last_token import DecoderEmbeddingModel

FROM_TOKEN = "classifier_from_token"


def is_decoder_classifier(config: dict) -> bool:
    return FROM_TOKEN in config or any(str(a).endswith("ForSequenceClassification")
                                       for a in config.get("architectures") or ())


class DecoderClassifier(DecoderEmbeddingModel):
    """Its rows' "vectors" are the logits, one per label."""

    classifies = True

    def __init__(self, model: Any, tokenizer: Any, score: mx.array, labels: tuple[str, ...], function: str, *,
                 config: dict[str, Any], reranks: bool, name: str = ""):
        super().__init__(model, tokenizer, tokenizer.eos_token_id or 0, config=config, name=name)
        self.score, self.labels, self.function, self.reranks = score, labels, function, reranks

    @classmethod
    def load(cls, model_dir: Path, **_: Any) -> "DecoderClassifier":
        from mlx_lm.tokenizer_utils import load as load_tokenizer
        from mlx_lm.utils import load_model

        from engine.hardware.device import runtime_dtype

        from ..mlx_typed import flatten, load_arrays

        model_dir = Path(model_dir)
        config = json.loads((model_dir / "config.json").read_text())
        weights: dict[str, mx.array] = {}
        for f in sorted(model_dir.glob("*.safetensors")):
            weights.update(load_arrays(str(f)))
        model, _ = load_model(model_dir, strict=False)
        if (dtype := runtime_dtype("auto")) is not None:
            model.set_dtype(dtype)
        missing = sorted(k for k, _ in flatten(model.model.parameters()) if f"model.{k}" not in weights)
        if missing:
            raise UnsupportedModel(f"{model_dir.name}: the backbone's weights are incomplete (missing "
                                   f"{missing[:3]})")
        tokenizer = load_tokenizer(model_dir)
        labels: tuple[str, ...]
        if FROM_TOKEN in config:
            score, labels = _from_tokens(model, tokenizer, config[FROM_TOKEN], weights, model_dir.name), ("yes",)
        else:
            labels = label_names(config)
            if "score.weight" not in weights:
                raise UnsupportedModel(f"{model_dir.name}: a sequence classifier without score.weight")
            score = weights["score.weight"]
            if score.shape != (len(labels), int(config["hidden_size"])):
                raise UnsupportedModel(f"{model_dir.name}: score.weight has shape {tuple(score.shape)}, the config "
                                       f"names {len(labels)} labels over {config['hidden_size']} hidden units")
        score = score.astype(mx.float32)
        mx.eval(score)
        function = SIGMOID if FROM_TOKEN in config else score_function(config, len(labels))
        return cls(model, tokenizer, score, labels, function, config=config, reranks=len(labels) == 1,
                   name=model_dir.name)

    @property
    def hidden_size(self) -> int:
        return len(self.labels)

    def scores(self, logits: np.ndarray) -> np.ndarray:
        return label_scores(logits, self.function)

    def encode(self, texts: Sequence[str], instruction: str | None = None) -> tuple[list[list[int]], list[int]]:
        ids = [list(self.tokenizer.encode(t)) for t in texts]
        return [row[: self.max_length] for row in ids], [i for i, row in enumerate(ids) if len(row) > self.max_length]

    def encode_pairs(self, query: str, documents: Sequence[str]) -> tuple[list[list[int]], list[int]]:
        """Each (query, document) pair as one text, the query's first; the indices of the
        documents cut to the input limit."""
        return self.encode([query + d for d in documents])

    def _forward(self, ids_list: list[list[int]]) -> np.ndarray:
        longest = max(len(ids) for ids in ids_list)
        padded = [ids + [ids[-1]] * (longest - len(ids)) for ids in ids_list]
        last = mx.array([len(ids) - 1 for ids in ids_list])
        with self._lock:
            hidden = self.model.model(mx.array(padded, dtype=mx.int32))  # (B, L, H), final norm
            pooled = hidden[mx.arange(len(ids_list)), last].astype(mx.float32)
            logits = pooled @ self.score.T
            mx.eval(logits)
            return np.array(logits, dtype=np.float32)


def _from_tokens(model: Any, tokenizer: Any, tokens: Any, weights: dict[str, mx.array], name: str) -> mx.array:
    """The one score row logit(yes) - logit(no): the output layer's rows of the two tokens."""
    if not (isinstance(tokens, list) and len(tokens) == 2 and all(isinstance(t, str) for t in tokens)):
        raise UnsupportedModel(f"{name}: {FROM_TOKEN} must name two tokens, the 'no' one first")
    ids = []
    for t in tokens:
        enc = tokenizer.encode(t, add_special_tokens=False)
        if len(enc) != 1:
            raise UnsupportedModel(f"{name}: {FROM_TOKEN} {t!r} is not one token")
        ids.append(enc[0])
    output = weights.get("lm_head.weight")
    if output is None:
        if not getattr(model.args, "tie_word_embeddings", False):
            raise UnsupportedModel(f"{name}: no lm_head.weight to score {tokens} with")
        output = weights["model.embed_tokens.weight"]
    return (output[ids[1]] - output[ids[0]])[None]
