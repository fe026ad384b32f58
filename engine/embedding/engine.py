"""The embedding engine's asyncio facade.

Invariants: all MLX work runs on the model's ``EngineThread`` (the one every model kind
shares), reached only by controls; request ids (``slots``) and cached results are scoped by
tenant (results by its cache namespace); a stalled or dead thread breaks the engine, failing
waiters with ``EngineDead``.
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any, AsyncIterator, Callable, TypeVar

from ..caches.objects import ObjectCache
from ..description import ModelDescription
from ..errors import InvalidRequest, NotReady, Unsupported
from ..liveness import Breaker
from ..loading.tokenizer_files import folder_files
from ..preparation import Preparation
from ..requests import (
    Classification,
    ClassifyRequest,
    EmbeddingRequest,
    EmbedSparseRequest,
    LabelScore,
    RerankRequest,
    RerankScore,
    SparseEmbedding,
)
from ..serving.admission import TenantStats
from ..serving.controls_only import ControlsOnly, Run
from ..serving.protocol import Control
from ..serving.thread import EngineThread
from ..tenancy import Tenant
from ..validation import Limits
from .admission_pool import AdmissionPool
from .batcher import Batcher
from .checks import check_classify, check_embed, check_embed_sparse, check_rerank
from .config import EmbeddingConfig
from .inputs import cache_key, calls_of, input_ids, text_ids
from .kinds import describe_model, load_embedder
from .pooling import EmbeddingModel, EmbeddingResult
from .slots import Slots
from .sparse import nonzero_weights

T = TypeVar("T")
R = TypeVar("R")


class EmbeddingEngine:
    def __init__(self, source: str | Path, *, name: str = "", limits: Limits = Limits(),
                 config: EmbeddingConfig = EmbeddingConfig()):
        self.source = str(source)
        self.config = config
        self.name = name or Path(self.source).name.lower()
        self.limits = limits
        self._thread: EngineThread[EmbeddingModel, Any, ControlsOnly[EmbeddingModel]] = EngineThread(
            f"embed-{self.name}", self._load, ControlsOnly)
        self._pool = AdmissionPool(config.max_active, config.max_queued, aging_s=config.priority_aging_s)
        self._model: EmbeddingModel | None = None
        self.weights_bytes = 0  # of the encoder in memory, once loaded
        self._slots = Slots(self.name)  # request ids for Cancel, tenants' requests in flight
        self.preparation = Preparation.of(limits)  # a ModelSet shares one among its engines
        self._batcher = Batcher(self._on_thread, config.batch_wait_s)  # requests in the pool share forwards
        self.breaker = Breaker(lambda: self.name, self._thread.fault, self._thread.give_up)
        # Vectors are immutable once made; keys hold the inputs, so they count too.
        self._results: ObjectCache[EmbeddingResult] = ObjectCache(
            max_entries=config.result_cache_entries, max_size=config.result_cache_bytes,
            size_of=lambda r: r.vector.nbytes, key_size=sys.getsizeof)

    def _load(self) -> EmbeddingModel:
        model = load_embedder(Path(self.source), self.config.precision, self.config.force_precision)
        self.weights_bytes = model.weights_bytes()
        return model

    async def start(self) -> None:
        self._model = await asyncio.wrap_future(self._thread.start())

    def control(self, control: Control[ControlsOnly[EmbeddingModel], T]) -> Future[T]:
        """``control.answer(core)`` on the engine thread, after the work queued before it."""
        return self._thread.ask(control)

    @property
    def idle(self) -> bool:
        """No request is open, no tenant counted and no input waits for a forward."""
        return self._slots.idle and not self._batcher.pending

    @property
    def forwards(self) -> int:
        """Shared forwards run since start (each holds the inputs of one or more requests)."""
        return self._batcher.forwards

    def holds(self, request_id: str, tenant: str = "") -> bool:
        """``tenant``'s request ``request_id`` is open here (what Cancel would find)."""
        return self._slots.holds(request_id, tenant)

    @property
    def ready(self) -> bool:
        return self._model is not None and not self._pool.closed and not self.breaker.broken

    @property
    def embeds(self) -> bool:
        """The model pools embeddings (Embed); False while loading."""
        return self._model is not None and not self._model.classifies and not self._model.sparse

    @property
    def reranks(self) -> bool:
        """The model is a cross-encoder (Rerank and Classify, not Embed); False while loading."""
        return self._model is not None and self._model.reranks

    @property
    def classifies(self) -> bool:
        """The model is a sequence classifier, a reranker included (Classify); False while loading."""
        return self._model is not None and self._model.classifies

    @property
    def embeds_sparse(self) -> bool:
        """The model is a SPLADE sparse encoder (EmbedSparse); False while loading."""
        return self._model is not None and self._model.sparse

    @property
    def model(self) -> EmbeddingModel:
        if self._model is None:
            raise NotReady(f"embedding model {self.name!r} is still loading")
        return self._model

    async def close(self) -> None:
        self._pool.close()
        await asyncio.to_thread(self._thread.stop)  # queued forwards finish first; a broken thread is left

    def describe(self) -> ModelDescription:
        return describe_model(self.model, self.name, self.source)

    @property
    def queued(self) -> int:
        return self._pool.queued

    @property
    def active(self) -> int:
        return self._pool.active

    @property
    def cache_hits(self) -> int:
        return self._results.hits

    @property
    def cache_bytes(self) -> int:
        return self._results.size

    def tenant_stats(self) -> tuple[TenantStats, ...]:
        """Each tenant's share of this model; any thread may call it."""
        return self._slots.tenants.snapshot()

    def cancel(self, request_id: str, tenant: str = "") -> bool:
        return self._slots.cancel(request_id, tenant)

    async def embed(self, request: EmbeddingRequest) -> AsyncIterator[tuple[int, EmbeddingResult]]:
        """Yields (input index, result) as batches complete."""
        model = self.model
        if model.classifies or model.sparse:
            raise Unsupported(f"model {self.name!r} does not pool embeddings; call {calls_of(model)}")
        check_embed(self.limits, request, model)
        async with self._admitted(request.request_id, request.tenant, request.priority) as seat:
            keys = [cache_key(request, item) for item in request.token_ids or request.inputs]
            missing = []
            for index, key in enumerate(keys):
                if (hit := self._results.take(key)) is None:
                    missing.append(index)
                    continue
                with hit as result:
                    yield index, result
            if not missing:
                return
            ids = await input_ids(model, request, missing, self.preparation)
            seat.charge(sum(map(len, ids)))
            async for position, result in self._batcher.embed(model, ids, normalize=request.normalize,
                                                              dimensions=request.dimensions or None):
                result.vector.flags.writeable = False  # shared through the cache from now on
                self._results.put(keys[missing[position]], result)
                yield missing[position], result

    async def rerank(self, request: RerankRequest) -> list[RerankScore]:
        """Every document's score (or the ``top_n`` highest), most relevant first."""
        model = self.model
        if not model.reranks:
            raise Unsupported(f"model {self.name!r} is not a reranker (a cross-encoder or a yes/no decoder); "
                              f"call {calls_of(model)}")
        check_rerank(self.limits, request, model)
        async with self._admitted(request.request_id, request.tenant, request.priority) as seat:
            ids, cut = await self.preparation.run(request.tenant, model.encode_pairs, request.query,
                                                  request.documents)
            if cut and not request.truncate:
                raise InvalidRequest(f"documents[{cut[0]}]", f"with the query, it is longer than the model's input "
                                                             f"limit of {model.max_length} tokens (truncate is off)")
            seat.charge(sum(map(len, ids)))
            scores = [RerankScore(index, float(result.vector[0]), result.tokens) async for index, result
                      in self._batcher.embed(model, ids, normalize=False, dimensions=None)]
        scores.sort(key=lambda s: (-s.score, s.index))
        return scores[:request.top_n] if request.top_n else scores

    async def classify(self, request: ClassifyRequest) -> list[Classification]:
        """Every input's label scores (or the ``top_k`` highest, highest first), in input order."""
        model = self.model
        if not model.classifies:
            raise Unsupported(f"model {self.name!r} is not a classifier; call {calls_of(model)}")
        check_classify(self.limits, request, model)
        async with self._admitted(request.request_id, request.tenant, request.priority) as seat:
            ids = await text_ids(self.preparation, model, request.tenant, request.inputs, request.truncate)
            seat.charge(sum(map(len, ids)))
            out: dict[int, Classification] = {}
            async for index, result in self._batcher.embed(model, ids, normalize=False, dimensions=None):
                scores = model.scores(result.vector)
                order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:request.top_k or None]
                out[index] = Classification(index, tuple(LabelScore(model.labels[i], float(scores[i]))
                                                         for i in order), result.tokens)
        return [out[i] for i in range(len(ids))]  # every input answered, or KeyError

    async def embed_sparse(self, request: EmbedSparseRequest) -> list[SparseEmbedding]:
        """Every input's nonzero SPLADE weights (or the ``top_k`` heaviest), ids ascending, in input order."""
        model = self.model
        if not model.sparse:
            raise Unsupported(f"model {self.name!r} is not a sparse (SPLADE) model; call {calls_of(model)}")
        check_embed_sparse(self.limits, request, model)
        async with self._admitted(request.request_id, request.tenant, request.priority) as seat:
            ids = await text_ids(self.preparation, model, request.tenant, request.inputs, request.truncate)
            seat.charge(sum(map(len, ids)))
            out: dict[int, SparseEmbedding] = {}
            async for index, result in self._batcher.embed(model, ids, normalize=False, dimensions=None):
                out[index] = SparseEmbedding(index, *nonzero_weights(result.vector, request.top_k), result.tokens)
        return [out[i] for i in range(len(ids))]  # every input answered, or KeyError

    def _admitted(self, request_id: str, tenant: Tenant, priority: int):
        """Holds an admission lease for a request, its id registered for Cancel: a Cancel call
        ends it with RequestCancelled (the caller's own cancellation stays a CancelledError)."""
        return self._slots.admitted(self._pool, request_id, tenant, priority, "embedding")

    async def _on_thread(self, fn: Callable[[], R]) -> R:
        """``fn()`` run on the engine thread; EngineDead once the engine is broken."""
        self.breaker.refuse()
        return await asyncio.wrap_future(self._thread.ask(Run(fn)))

    def tokenize(self, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        return self.model.tokenize(text, add_special_tokens)

    async def tokenize_for(self, tenant: Tenant, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        """``tokenize`` in the preparation pool, counted in ``tenant``'s requests in flight."""
        return await self._prepared(tenant, self.tokenize, text, add_special_tokens)

    async def detokenize_for(self, tenant: Tenant, ids: list[int], skip_special_tokens: bool) -> str:
        """``detokenize`` in the preparation pool, counted in ``tenant``'s requests in flight."""
        return await self._prepared(tenant, self.detokenize, ids, skip_special_tokens)

    async def _prepared(self, tenant: Tenant, fn, *args):
        with self._slots.counted(tenant):
            return await self.preparation.run(tenant, fn, *args)

    def tokenizer_files(self) -> dict[str, bytes]:
        """What a router needs to tokenize as this model does, by file name; blocking."""
        self.model
        return folder_files(Path(self.source))

    @property
    def max_prompt_tokens(self) -> int:
        return self.model.max_length

    def detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        vocab = self.model.vocab_size
        for i in ids:
            if not 0 <= i < vocab:
                raise InvalidRequest("token_ids", f"token id {i} is outside the vocabulary [0, {vocab})")
        return self.model.detokenize(ids, skip_special_tokens)
