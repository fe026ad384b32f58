"""Validation of Embed, Rerank, Classify and EmbedSparse requests against the engine's limits and its model.

Invariant: every check runs before admission, so a refused request never holds a slot.
"""

from __future__ import annotations

from ..errors import InvalidRequest
from ..requests import ClassifyRequest, EmbeddingRequest, EmbedSparseRequest, RerankRequest
from ..validation import Limits, at_most, check_ids, check_priority, check_text_bytes
from .pooling import EmbeddingModel


def check_embed(limits: Limits, request: EmbeddingRequest, model: EmbeddingModel) -> None:
    limits = limits.for_context(model.max_length)
    check_ids(limits, request_id=request.request_id)
    check_priority(request.priority)
    if request.inputs and request.token_ids:
        raise InvalidRequest("inputs", "give texts or token ids, not both")
    if not request.inputs and not request.token_ids:
        raise InvalidRequest("inputs", "at least one input is required")
    at_most("inputs", len(request.inputs or request.token_ids), limits.max_embed_inputs, "inputs")
    for i, text in enumerate(request.inputs):
        check_text_bytes(f"inputs[{i}]", (text,), limits.max_embed_input_bytes)
    check_text_bytes("instruction", (request.instruction,), limits.max_embed_input_bytes)
    if request.dimensions < 0 or request.dimensions > model.hidden_size:
        raise InvalidRequest("dimensions", f"must be between 0 and {model.hidden_size}")


def check_rerank(limits: Limits, request: RerankRequest, model: EmbeddingModel) -> None:
    limits = limits.for_context(model.max_length)
    check_ids(limits, request_id=request.request_id)
    check_priority(request.priority)
    if not request.documents:
        raise InvalidRequest("documents", "at least one document is required")
    at_most("documents", len(request.documents), limits.max_embed_inputs, "documents")
    check_text_bytes("query", (request.query,), limits.max_embed_input_bytes)
    for i, text in enumerate(request.documents):
        check_text_bytes(f"documents[{i}]", (text,), limits.max_embed_input_bytes)
    if request.top_n < 0:
        raise InvalidRequest("top_n", "must be 0 (every document) or more")


def check_classify(limits: Limits, request: ClassifyRequest, model: EmbeddingModel) -> None:
    _check_texts(limits, request, model)
    if request.top_k < 0:
        raise InvalidRequest("top_k", "must be 0 (every label) or more")


def check_embed_sparse(limits: Limits, request: EmbedSparseRequest, model: EmbeddingModel) -> None:
    _check_texts(limits, request, model)
    if request.top_k < 0:
        raise InvalidRequest("top_k", "must be 0 (every nonzero weight) or more")


def _check_texts(limits: Limits, request: ClassifyRequest | EmbedSparseRequest, model: EmbeddingModel) -> None:
    """The id, priority and ``inputs`` (texts, each on its own) of a Classify or EmbedSparse."""
    limits = limits.for_context(model.max_length)
    check_ids(limits, request_id=request.request_id)
    check_priority(request.priority)
    if not request.inputs:
        raise InvalidRequest("inputs", "at least one input is required")
    at_most("inputs", len(request.inputs), limits.max_embed_inputs, "inputs")
    for i, text in enumerate(request.inputs):
        check_text_bytes(f"inputs[{i}]", (text,), limits.max_embed_input_bytes)
