"""A BERT sequence classifier over (query, document) pairs: a reranker's relevance logits.

Invariants: the pair is encoded as the tokenizer's pair template ([CLS] query [SEP] document
[SEP]) with segment ids 0 then 1 from the first [SEP] on; the score is the classifier's one
logit over the pooler's tanh(dense([CLS])).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from tokenizers import Tokenizer

from ..errors import UnsupportedModel
from .encoder import load_encoder
from .pooling import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, EmbeddingModel

ARCHITECTURE = "ForSequenceClassification"


def is_cross_encoder(config: dict) -> bool:
    return any(str(a).endswith(ARCHITECTURE) for a in config.get("architectures") or ())


class ClassifierHead(nn.Module):
    """HF's pooler (dense + tanh over [CLS]) and classifier (one label)."""

    def __init__(self, hidden: int, labels: int):
        super().__init__()
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, labels)

    def __call__(self, cls: mx.array) -> mx.array:
        return self.classifier(mx.tanh(self.pooler(cls)))


class CrossEncoderModel(EmbeddingModel):
    def __init__(self, encoder, tokenizer: Tokenizer, head: ClassifierHead, **kwargs):
        super().__init__(encoder, tokenizer, pooling="cls", **kwargs)
        self.head = head
        self._sep = tokenizer.token_to_id("[SEP]")
        if self._sep is None:
            raise UnsupportedModel(f"{self.name}: the tokenizer has no [SEP] token to separate query and document")

    @classmethod
    def load(cls, model_dir: Path, *, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
             max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, max_length: int | None = None) -> "CrossEncoderModel":
        model_dir = Path(model_dir)
        config = json.loads((model_dir / "config.json").read_text())
        labels = len(config.get("id2label") or {"0": ""}) if "num_labels" not in config else int(config["num_labels"])
        if labels != 1:
            raise UnsupportedModel(f"{model_dir.name}: a reranker needs one output label, this classifier has "
                                   f"{labels}")
        weights = {}
        for f in sorted(model_dir.glob("*.safetensors")):
            weights.update(mx.load(str(f)))
        head = ClassifierHead(int(config["hidden_size"]), 1)
        head.load_weights([("pooler.weight", weights["bert.pooler.dense.weight"]),
                           ("pooler.bias", weights["bert.pooler.dense.bias"]),
                           ("classifier.weight", weights["classifier.weight"]),
                           ("classifier.bias", weights["classifier.bias"])], strict=True)
        mx.eval(head.parameters())
        return cls(load_encoder(model_dir), Tokenizer.from_file(str(model_dir / "tokenizer.json")), head,
                   max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens, max_length=max_length,
                   name=model_dir.name)

    @property
    def hidden_size(self) -> int:
        return 1  # one score per pair

    def encode_pairs(self, query: str, documents: Sequence[str]) -> tuple[list[list[int]], list[int]]:
        """Token ids of each (query, document) pair, cut to the input limit (the longer side
        first), and the indices of the documents that had to be cut."""
        q = len(self.tokenizer.encode(query, add_special_tokens=False).ids)
        sides = self.tokenizer.encode_batch(list(documents), add_special_tokens=False)
        cut = [i for i, d in enumerate(sides) if q + len(d.ids) + 3 > self.max_length or d.overflowing]
        pairs = self.tokenizer.encode_batch([(query, d) for d in documents], add_special_tokens=True)
        return [list(p.ids) for p in pairs], cut

    def _forward(self, ids_list: list[list[int]]) -> np.ndarray:
        """Each pair's logit, shape (B, 1)."""
        L = max(len(ids) for ids in ids_list)
        ids = np.full((len(ids_list), L), self._pad_id, dtype=np.int32)
        mask = np.zeros((len(ids_list), L), dtype=np.int32)
        types = np.zeros((len(ids_list), L), dtype=np.int32)
        for r, row in enumerate(ids_list):
            ids[r, :len(row)] = row
            mask[r, :len(row)] = 1
            first_sep = row.index(self._sep) if self._sep in row else len(row)
            types[r, first_sep + 1:len(row)] = 1
        with self._lock:
            h = self.encoder(mx.array(ids), mx.array(mask), mx.array(types))
            logits = self.head(h[:, 0, :]).astype(mx.float32)
            mx.eval(logits)
            return np.array(logits, dtype=np.float32)
