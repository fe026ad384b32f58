"""EmbedSparse's request and its answer as Python values: one ``SparseVector`` per input, in
input order, its vocabulary ids ascending with their weights (every one above 0)."""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

from . import pb
from ._common import Truncate, _truncation


def embed_sparse_request(
    inputs: str | Sequence[str],
    *,
    model: str = "",
    top_k: int = 0,
    truncate: Truncate | None = None,
    request_id: str = "",
    priority: int = 0,
) -> pb.EmbedSparseRequest:
    """Builds an EmbedSparseRequest: each of ``inputs`` embedded on its own by a SPLADE model
    (``model`` empty: the server's first). ``top_k`` keeps only each input's heaviest weights
    (0: every nonzero one); ``truncate`` and ``priority`` as in :func:`embed_request`."""
    req = pb.EmbedSparseRequest(
        model=model,
        inputs=[inputs] if isinstance(inputs, str) else list(inputs),
        top_k=top_k,
        request_id=request_id,
        priority=priority,
    )
    if truncate is not None:
        req.truncate = _truncation(truncate)
    return req


@dataclasses.dataclass(frozen=True)
class SparseVector:
    """One input's sparse vector: ``token_ids`` (vocabulary ids, ascending) and their
    ``weights``; every other id weighs 0."""

    index: int  # the input's position in the request
    token_ids: tuple[int, ...]
    weights: tuple[float, ...]
    tokens: int  # tokens the input used, after truncation

    def as_dict(self) -> dict[int, float]:
        """``{token id: weight}``."""
        return dict(zip(self.token_ids, self.weights))

    def dot(self, other: "SparseVector") -> float:
        """The dot product with ``other`` (a query's vector against a document's)."""
        mine = self.as_dict()
        return sum(mine.get(i, 0.0) * w for i, w in zip(other.token_ids, other.weights))


@dataclasses.dataclass(frozen=True)
class SparseEmbeddings(Sequence[SparseVector]):
    """EmbedSparse's answer: the ``model`` that embedded, and a ``SparseVector`` per input in
    input order (``vectors``; the object is also a sequence of them)."""

    model: str
    vectors: tuple[SparseVector, ...]

    @classmethod
    def of(cls, reply: pb.EmbedSparseResponse) -> "SparseEmbeddings":
        vectors = sorted((SparseVector(e.index, tuple(e.token_ids), tuple(e.weights), e.tokens)
                          for e in reply.embeddings), key=lambda v: v.index)
        return cls(reply.model, tuple(vectors))

    def __len__(self) -> int:
        return len(self.vectors)

    def __getitem__(self, i):  # type: ignore[override]
        return self.vectors[i]

    def __iter__(self) -> Iterator[SparseVector]:
        return iter(self.vectors)
