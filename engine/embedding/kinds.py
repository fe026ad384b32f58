"""The pooled model a directory holds (an embedding encoder or decoder, a sequence classifier,
a one-label cross-encoder, a decoder classifier or yes/no reranker, a SPLADE sparse encoder)
and how each kind describes itself.

Invariant: a ``*ForSequenceClassification`` BERT with one label is a reranker (Rerank and
Classify), with more labels a classifier (Classify only); a decoder classifier likewise,
and a decoder with ``classifier_from_token`` is a reranker; a ``*ForMaskedLM`` BERT is a
SPLADE model (EmbedSparse only); every other model embeds.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .. import kernels
from ..description import Capabilities, GraphDescriptor, ModelDescription, ModelKind
from ..hardware.device import backend_name, blas_name
from .classifier import SequenceClassifier, is_sequence_classifier, label_names
from .cross_encoder import CrossEncoderModel
from .decoder_classifier import DecoderClassifier, is_decoder_classifier
from .last_token import DecoderEmbeddingModel
from .pooling import EmbeddingModel
from .precision import Precision, choose
from .sparse import SparseEncoder, is_masked_lm

log = logging.getLogger("engine.embedding")


def load_embedder(model_dir: Path, precision: str = "f32", force_precision: bool = False) -> EmbeddingModel:
    """A BERT encoder (a sequence classifier when it classifies: a cross-encoder with one label),
    or else an mlx-lm decoder with last-token pooling; CPU kernels put in, and the encoder's
    products in ``precision`` where it runs (see ``precision.choose``)."""
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") == "bert":
        kind: type[EmbeddingModel] = EmbeddingModel
        if is_sequence_classifier(config):
            kind = CrossEncoderModel if len(label_names(config)) == 1 else SequenceClassifier
        elif is_masked_lm(config):
            kind = SparseEncoder
        model = kind.load(model_dir)
        packed = bool(kernels.apply_to_encoder(model.encoder, model.name))
        if packed:
            model.max_batch_size = max(model.max_batch_size, kernels.PACKED_BATCH_SIZE)
            model.max_batch_tokens = max(kernels.PACKED_BATCH_TOKENS, model.max_length)
        model.precision = _set_precision(model, precision, force_precision, packed)
        return model
    model = (DecoderClassifier if is_decoder_classifier(config) else DecoderEmbeddingModel).load(model_dir)
    kernels.apply_to_decoder(model.model, model.name)
    model.precision = _announced(model.name, choose(precision, encoder_widths=None, kernels=None))
    return model


def _set_precision(model: EmbeddingModel, requested: str, force: bool, packed: bool) -> Precision:
    # Only with the kernels.
    from ..kernels import encoder as packed_encoder
    from ..kernels import ggml

    cfg = model.encoder.config
    why = None if packed else "the CPU kernels are off" if not kernels.enabled() else "the encoder is not packed"
    own = packed and kernels.enabled() and packed_encoder.own_product(requested)
    if why is None and requested != "f32" and not own:  # the kernels' own products need no ggml
        try:
            ggml.open_backend()
        except ggml.GgmlUnavailable as exc:
            why = str(exc)
    chosen = choose(requested, encoder_widths=(cfg.hidden_size, cfg.intermediate_size), kernels=why, force=force)
    if chosen.running != "f32":
        packed_encoder.set_products(model.encoder, chosen.running, chosen.ggml_type)
    return _announced(model.name, chosen)


def _announced(name: str, chosen: Precision) -> Precision:
    if chosen.reason:
        log.warning("%s: %s", name, chosen.reason)
    elif chosen.running != "f32":
        log.info("%s: %s products (ggml)", name, chosen.running)
    return chosen


def describe_model(m: EmbeddingModel, name: str, source: str) -> ModelDescription:
    reranker, classifier, sparse = m.reranks, m.classifies, m.sparse
    if isinstance(m, DecoderEmbeddingModel):
        head = "+yes-no-scoring" if reranker else "+sequence-classification" if classifier else "+last-token-pooling"
        graph_id, abi = f"mlx-lm/{m.model_type}{head}", "mlx-lm/forward-v1"
    else:
        graph_id = ("mlx-grpc/bert-cross-encoder" if reranker else "mlx-grpc/bert-classifier" if classifier
                    else "mlx-grpc/bert-splade" if sparse else "mlx-grpc/bert-encoder")
        abi = "encoder-forward-v1"
    return ModelDescription(
        name=name, kind=ModelKind.EMBEDDING,
        descriptor=GraphDescriptor(graph_id, backend_name(), abi, "stateless", source),
        capabilities=Capabilities(embeddings=not (classifier or sparse), generation=False, rerank=reranker,
                                  classify=classifier, sparse_embeddings=sparse),
        context_length=m.max_length, vocab_size=m.vocab_size, eos_token_ids=(),
        has_chat_template=False, dtype=m.precision.dtype, blas=blas_name(),
        embedding_dimensions=0 if classifier or sparse else m.hidden_size, source=source)
