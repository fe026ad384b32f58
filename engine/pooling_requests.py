"""Plain request and result types of the pooling tasks: Embed, Rerank, Classify and EmbedSparse
(no protobuf, no tensors; a sparse vector's arrays are numpy, read-only)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tenancy import ANONYMOUS, Tenant


@dataclass(frozen=True)
class EmbeddingRequest:
    """Texts in ``inputs``, or inputs already tokenized (special tokens included) in ``token_ids``."""

    inputs: tuple[str, ...]
    token_ids: tuple[tuple[int, ...], ...] = ()
    model: str = ""
    request_id: str = ""
    instruction: str = ""
    normalize: bool = True
    dimensions: int = 0
    tenant: Tenant = ANONYMOUS
    priority: int = 0
    truncate: bool = True  # cut an input over the model's limit (False: refuse the request)


@dataclass(frozen=True)
class RerankRequest:
    """Documents to score against ``query`` with a cross-encoder."""

    query: str
    documents: tuple[str, ...]
    model: str = ""
    request_id: str = ""
    top_n: int = 0  # 0: every document
    truncate: bool = True  # cut a pair over the model's limit, the longer side first (False: refuse)
    tenant: Tenant = ANONYMOUS
    priority: int = 0


@dataclass(frozen=True)
class RerankScore:
    index: int  # in RerankRequest.documents
    score: float  # the model's relevance logit
    tokens: int  # of the query and document together, after truncation


@dataclass(frozen=True)
class ClassifyRequest:
    """Texts to classify with a sequence classifier (or a reranker: its one label)."""

    inputs: tuple[str, ...]
    model: str = ""
    request_id: str = ""
    top_k: int = 0  # 0: every label
    truncate: bool = True  # cut an input over the model's limit (False: refuse)
    tenant: Tenant = ANONYMOUS
    priority: int = 0


@dataclass(frozen=True)
class LabelScore:
    label: str
    score: float  # softmax probability, or the sigmoid of the label's logit


@dataclass(frozen=True)
class Classification:
    index: int  # in ClassifyRequest.inputs
    labels: tuple[LabelScore, ...]  # highest first (ties: label order), at most top_k
    tokens: int  # of the input, after truncation


@dataclass(frozen=True)
class EmbedSparseRequest:
    """Texts to embed as sparse vocabulary-weight vectors with a SPLADE model."""

    inputs: tuple[str, ...]
    model: str = ""
    request_id: str = ""
    top_k: int = 0  # 0: every nonzero weight
    truncate: bool = True  # cut an input over the model's limit (False: refuse)
    tenant: Tenant = ANONYMOUS
    priority: int = 0


@dataclass(frozen=True, eq=False)
class SparseEmbedding:
    index: int  # in EmbedSparseRequest.inputs
    token_ids: np.ndarray  # int32 vocabulary ids, ascending; at most top_k
    weights: np.ndarray  # float32, each > 0, in the order of token_ids
    tokens: int  # of the input, after truncation
