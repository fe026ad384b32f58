"""An embedding request's inputs: what keys its cached results, and its token ids
(tokenized on the preparation pool, never the engine thread; an input over the model's
limit refused unless the request truncates)."""

from __future__ import annotations

import json

from ..errors import InvalidRequest
from ..preparation import Preparation
from ..requests import EmbeddingRequest
from ..tenancy import Tenant
from .pooling import EmbeddingModel


def cache_key(request: EmbeddingRequest, item: str | tuple[int, ...]) -> str:
    """Everything that determines the vector of ``item`` (a text or token ids), or its refusal,
    under the tenant's cache namespace: a tenant never hits another's entry."""
    return json.dumps([request.tenant.namespace, request.instruction, request.normalize, request.dimensions,
                       request.truncate, item])


def calls_of(model: EmbeddingModel) -> str:
    """The calls ``model`` answers, for an error that names the right one."""
    if model.sparse:
        return "EmbedSparse"
    return "Rerank or Classify" if model.reranks else "Classify" if model.classifies else "Embed"


async def text_ids(preparation: Preparation, model: EmbeddingModel, tenant: Tenant, texts: tuple[str, ...],
                   truncate: bool) -> list[list[int]]:
    """Token ids per text (tokenized off the engine thread); one over the input limit refused
    unless ``truncate``."""
    ids, cut = await preparation.run(tenant, model.encode, texts)
    if cut and not truncate:
        raise InvalidRequest(f"inputs[{cut[0]}]", f"is longer than the model's input limit of "
                                                  f"{model.max_length} tokens (truncate is off)")
    return ids


async def input_ids(model: EmbeddingModel, request: EmbeddingRequest, indices: list[int],
                    preparation: Preparation) -> list[list[int]]:
    """The inputs at ``indices`` as the forward takes them (tokenized off the engine thread)."""
    if request.token_ids:
        try:
            return model.prepare_ids([request.token_ids[i] for i in indices])
        except ValueError as exc:
            raise InvalidRequest("token_ids", str(exc)) from None
    texts = [request.inputs[i] for i in indices]
    ids, cut = await preparation.run(request.tenant, model.encode, texts, request.instruction or None)
    if cut and not request.truncate:
        raise InvalidRequest(f"inputs[{indices[cut[0]]}]", f"is longer than the model's input limit of "
                                                           f"{model.max_length} tokens (truncate is off)")
    return ids
