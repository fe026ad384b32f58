"""A BERT sequence classifier (``*ForSequenceClassification``): every label's score for a text.

Invariants: the head is HF's pooler (dense + tanh over [CLS]) then the classifier, one logit per
label; a row's segment ids are 0 up to ``_segment_start`` and 1 from there (a single text: 0
throughout); scores are the softmax over the logits (single-label, or no problem_type, with more
than one label) or each logit's sigmoid (multi-label, and a single label: TEI's convention).
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from tokenizers import Tokenizer

from ..errors import UnsupportedModel
from ..mlx_typed import load_arrays
from .encoder import load_encoder
from .pooling import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, EmbeddingModel

ARCHITECTURE = "ForSequenceClassification"
SOFTMAX, SIGMOID = "softmax", "sigmoid"


def is_sequence_classifier(config: dict) -> bool:
    return any(str(a).endswith(ARCHITECTURE) for a in config.get("architectures") or ())


def label_names(config: dict) -> tuple[str, ...]:
    """``id2label`` in id order ("LABEL_i" where it names none); its size, or ``num_labels``
    when given, is the label count (neither: one label)."""
    id2label = {str(k): str(v) for k, v in (config.get("id2label") or {}).items()}
    count = int(config["num_labels"]) if "num_labels" in config else len(id2label) or 1
    return tuple(id2label.get(str(i)) or f"LABEL_{i}" for i in range(count))


def score_function(config: dict, labels: int) -> str:
    problem = config.get("problem_type")
    if labels == 1 or problem == "multi_label_classification":
        return SIGMOID
    if problem in (None, "single_label_classification"):
        return SOFTMAX
    raise UnsupportedModel(f"problem_type {problem!r} with {labels} labels is not served (a classifier's "
                           f"problem_type is single_label_classification or multi_label_classification)")


def label_scores(logits: np.ndarray, function: str) -> np.ndarray:
    """One row's logits as scores (float32, label order): their softmax, or each one's sigmoid."""
    x = logits.astype(np.float64)
    if function == SOFTMAX:
        e = np.exp(x - x.max())
        return (e / e.sum()).astype(np.float32)
    return (0.5 * (1.0 + np.tanh(0.5 * x))).astype(np.float32)  # the sigmoid, without overflow


class ClassifierHead(nn.Module):
    """HF's pooler (dense + tanh over [CLS]) and classifier (one output per label)."""

    def __init__(self, hidden: int, labels: int):
        super().__init__()
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, labels)

    def __call__(self, cls: mx.array) -> mx.array:
        return self.classifier(mx.tanh(self.pooler(cls)))


class SequenceClassifier(EmbeddingModel):
    """Its rows' "vectors" are the logits, one per label (``hidden_size`` is the label count)."""

    classifies = True

    def __init__(self, encoder, tokenizer: Tokenizer, head: ClassifierHead, labels: tuple[str, ...],
                 function: str, **kwargs):
        super().__init__(encoder, tokenizer, pooling="cls", **kwargs)
        self.head, self.labels, self.function = head, labels, function

    @classmethod
    def load(cls, model_dir: Path, *, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
             max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, max_length: int | None = None):
        model_dir = Path(model_dir)
        config = json.loads((model_dir / "config.json").read_text())
        labels = label_names(config)
        function = score_function(config, len(labels))
        weights = {}
        for f in sorted(model_dir.glob("*.safetensors")):
            weights.update(load_arrays(str(f)))
        rows = weights["classifier.weight"].shape[0]
        if rows != len(labels):
            raise UnsupportedModel(f"{model_dir.name}: the classifier has {rows} outputs, the config names "
                                   f"{len(labels)} labels")
        head = ClassifierHead(int(config["hidden_size"]), rows)
        head.load_weights([("pooler.weight", weights["bert.pooler.dense.weight"]),
                           ("pooler.bias", weights["bert.pooler.dense.bias"]),
                           ("classifier.weight", weights["classifier.weight"]),
                           ("classifier.bias", weights["classifier.bias"])], strict=True)
        mx.eval(head.parameters())
        return cls(load_encoder(model_dir), Tokenizer.from_file(str(model_dir / "tokenizer.json")), head, labels,
                   function, max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens,
                   max_length=max_length, name=model_dir.name)

    @property
    def hidden_size(self) -> int:
        return len(self.labels)

    def scores(self, logits: np.ndarray) -> np.ndarray:
        """Each label's score from one row's logits (float32, label order)."""
        return label_scores(logits, self.function)

    def _segment_start(self, row: list[int]) -> int:
        return len(row)  # a single text: segment 0 throughout

    def _forward(self, ids_list: list[list[int]]) -> np.ndarray:
        """Each row's logits, shape (B, labels)."""
        L = max(len(ids) for ids in ids_list)
        ids = np.full((len(ids_list), L), self._pad_id, dtype=np.int32)
        mask = np.zeros((len(ids_list), L), dtype=np.int32)
        types = np.zeros((len(ids_list), L), dtype=np.int32)
        for r, row in enumerate(ids_list):
            ids[r, :len(row)] = row
            mask[r, :len(row)] = 1
            types[r, self._segment_start(row):len(row)] = 1
        with self._lock:
            h = self.encoder(mx.array(ids), mx.array(mask), mx.array(types))
            logits = self.head(h[:, 0, :]).astype(mx.float32)
            mx.eval(logits)
            return np.array(logits, dtype=np.float32)
