"""A BERT sequence classifier over (query, document) pairs: a reranker's relevance logits.

Invariants: the pair is encoded as the tokenizer's pair template ([CLS] query [SEP] document
[SEP]) with segment ids 0 then 1 from the first [SEP] on; the score is the classifier's one
logit over the pooler's tanh(dense([CLS])). A single text (Classify) is a row of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tokenizers import Tokenizer

from ..errors import UnsupportedModel
from .classifier import SIGMOID, ClassifierHead, SequenceClassifier
from .pooling import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS


class CrossEncoderModel(SequenceClassifier):
    reranks = True

    def __init__(self, encoder, tokenizer: Tokenizer, head: ClassifierHead, labels: tuple[str, ...] = ("LABEL_0",),
                 function: str = SIGMOID, **kwargs):
        super().__init__(encoder, tokenizer, head, labels, function, **kwargs)
        self._sep = tokenizer.token_to_id("[SEP]")
        if self._sep is None:
            raise UnsupportedModel(f"{self.name}: the tokenizer has no [SEP] token to separate query and document")

    @classmethod
    def load(cls, model_dir: Path, *, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
             max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, max_length: int | None = None) -> "CrossEncoderModel":
        model = super().load(model_dir, max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens,
                             max_length=max_length)
        if len(model.labels) != 1:
            raise UnsupportedModel(f"{Path(model_dir).name}: a reranker needs one output label, this classifier "
                                   f"has {len(model.labels)}")
        return model

    def encode_pairs(self, query: str, documents: Sequence[str]) -> tuple[list[list[int]], list[int]]:
        """Token ids of each (query, document) pair, cut to the input limit (the longer side
        first), and the indices of the documents that had to be cut."""
        q = len(self.tokenizer.encode(query, add_special_tokens=False).ids)
        sides = self.tokenizer.encode_batch(list(documents), add_special_tokens=False)
        cut = [i for i, d in enumerate(sides) if q + len(d.ids) + 3 > self.max_length or d.overflowing]
        pairs = self.tokenizer.encode_batch([(query, d) for d in documents], add_special_tokens=True)
        return [list(p.ids) for p in pairs], cut

    def _segment_start(self, row: list[int]) -> int:
        return row.index(self._sep) + 1 if self._sep in row else len(row)
