"""Protobuf <-> engine conversion for the pooling tasks: Embed (per input or packed),
Rerank, Classify and EmbedSparse. No logic beyond translation."""

from __future__ import annotations

from engine.embedding.packing import EmbeddingType, pack
from engine.errors import InvalidRequest
from engine.requests import ClassifyRequest, EmbeddingRequest, EmbedSparseRequest, RerankRequest
from engine.tenancy import ANONYMOUS, Tenant

from .gen.mlxgrpc.v1 import inference_service_pb2 as pb


def embedding_request(msg: pb.EmbedRequest, tenant: Tenant = ANONYMOUS) -> EmbeddingRequest:
    return EmbeddingRequest(tenant=tenant, priority=msg.priority,
        inputs=tuple(msg.inputs), model=msg.model, request_id=msg.request_id,
        instruction=msg.instruction, normalize=msg.normalize if msg.HasField("normalize") else True,
        dimensions=msg.dimensions, truncate=_truncates(msg.truncate))


def rerank_request(msg: pb.RerankRequest, tenant: Tenant = ANONYMOUS) -> RerankRequest:
    return RerankRequest(query=msg.query, documents=tuple(msg.documents), model=msg.model,
                         request_id=msg.request_id, top_n=msg.top_n, truncate=_truncates(msg.truncate),
                         tenant=tenant, priority=msg.priority)


def rerank_response(model: str, scores) -> pb.RerankResponse:
    """``scores``: the engine's RerankScore list, in order."""
    return pb.RerankResponse(model=model, results=[pb.RerankResult(index=s.index, score=s.score, tokens=s.tokens)
                                                   for s in scores])


def classify_request(msg: pb.ClassifyRequest, tenant: Tenant = ANONYMOUS) -> ClassifyRequest:
    return ClassifyRequest(inputs=tuple(msg.inputs), model=msg.model, request_id=msg.request_id, top_k=msg.top_k,
                           truncate=_truncates(msg.truncate), tenant=tenant, priority=msg.priority)


def classify_response(model: str, results) -> pb.ClassifyResponse:
    """``results``: the engine's Classification list, in input order."""
    return pb.ClassifyResponse(model=model, results=[
        pb.Classification(index=r.index, tokens=r.tokens,
                          labels=[pb.LabelScore(label=s.label, score=s.score) for s in r.labels]) for r in results])


def embed_sparse_request(msg: pb.EmbedSparseRequest, tenant: Tenant = ANONYMOUS) -> EmbedSparseRequest:
    return EmbedSparseRequest(inputs=tuple(msg.inputs), model=msg.model, request_id=msg.request_id,
                              top_k=msg.top_k, truncate=_truncates(msg.truncate), tenant=tenant,
                              priority=msg.priority)


def embed_sparse_response(model: str, results) -> pb.EmbedSparseResponse:
    """``results``: the engine's SparseEmbedding list, in input order."""
    return pb.EmbedSparseResponse(model=model, embeddings=[
        pb.SparseEmbedding(index=r.index, token_ids=r.token_ids.tolist(), weights=r.weights.tolist(),
                           tokens=r.tokens) for r in results])


def _truncates(truncation: int) -> bool:
    if truncation not in pb.Truncation.values():
        raise InvalidRequest("truncate", f"unknown value {truncation}")
    return truncation != pb.TRUNCATION_NONE


PACKED_PER_MESSAGE = 64  # vectors one packed EmbedResponse carries at most
_EMBEDDING_TYPE = {pb.EMBEDDING_TYPE_UNSPECIFIED: EmbeddingType.FLOAT32,
                   pb.EMBEDDING_TYPE_FLOAT32: EmbeddingType.FLOAT32, pb.EMBEDDING_TYPE_FLOAT16: EmbeddingType.FLOAT16,
                   pb.EMBEDDING_TYPE_INT8: EmbeddingType.INT8, pb.EMBEDDING_TYPE_UBINARY: EmbeddingType.UBINARY}
_EMBEDDING_TYPE_PB = {kind: value for value, kind in _EMBEDDING_TYPE.items() if value}


def embedding_layout(msg: pb.EmbedRequest) -> EmbeddingType | None:
    """The packed vectors' element type; None: one message per input, float32 values."""
    kind = _EMBEDDING_TYPE.get(msg.embedding_type)
    if kind is None:
        raise InvalidRequest("embedding_type", f"unknown value {msg.embedding_type}")
    if not msg.packed and kind is not EmbeddingType.FLOAT32:
        raise InvalidRequest("embedding_type", "needs packed: true (a message per input carries float32 values)")
    return kind if msg.packed else None


def packed_response(results: list, kind: EmbeddingType) -> pb.EmbedResponse:
    """``results``: (input index, the engine's EmbeddingResult) pairs, one message."""
    packed = pack([r.vector for _, r in results], kind)
    return pb.EmbedResponse(packed=pb.PackedEmbeddings(
        indices=[i for i, _ in results], tokens=[r.tokens for _, r in results], dimensions=len(results[0][1].vector),
        type=_EMBEDDING_TYPE_PB[kind], data=packed.data, scales=packed.scales))


def embed_response(index: int, result) -> pb.EmbedResponse:
    """One input's vector (``result``: the engine's EmbeddingResult)."""
    return pb.EmbedResponse(index=index, embedding=result.vector.tolist(), tokens=result.tokens)
