"""The set of served models: generation, embedding and speech engines by name."""

from __future__ import annotations

import asyncio
from typing import Union

from .description import ModelDescription
from .embedding.engine import EmbeddingEngine
from .errors import ModelNotFound, NotReady, Unsupported
from .generation.frontend.engine import GenerationEngine
from .preparation import Preparation
from .residency.lifecycle import Lifecycle
from .speech.engine import SpeechEngine
from .validation import Limits

Engine = Union[GenerationEngine, EmbeddingEngine, SpeechEngine]


class ModelSet:
    """Resolves request model names; the first model of each kind is its default."""

    def __init__(self, generation: list[GenerationEngine], embedding: list[EmbeddingEngine],
                 preparation: Preparation | None = None, lifecycle: Lifecycle | None = None,
                 speech: list[SpeechEngine] | None = None):
        from .residency.residency import Residency  # it serves this set

        self.generation = list(generation)
        self.embedding = list(embedding)
        self.speech = list(speech or ())
        # one preparation pool (tokenizing, chat rendering) for every engine: its bounds are the server's
        self.preparation = preparation or (self.all[0].preparation if self.all else Preparation())
        for engine in self.all:
            engine.preparation = self.preparation
        self._leaving: list[Engine] = []  # unloading: not served, their requests still cancellable
        self.residency = Residency(self, lifecycle or Lifecycle())

    async def start(self) -> None:
        """Loads every model (concurrently; each on its own engine thread), then the catalog's pinned ones."""
        await asyncio.gather(*(e.start() for e in self.all))
        await self.residency.start()

    async def close(self) -> None:
        await self.residency.close()
        await asyncio.gather(*(e.close() for e in [*self.all, *self._leaving]), return_exceptions=True)
        self.preparation.close()

    def share(self, engine: Engine) -> None:
        """Gives a model loaded at run time the set's preparation pool (before it starts)."""
        engine.preparation = self.preparation

    def add(self, engine: Engine) -> None:
        """Serves a model loaded at run time (after the command line's of its kind)."""
        self._kind_of(engine).append(engine)

    def retire(self, engine: Engine) -> None:
        """Stops serving ``engine`` to new requests; Cancel still finds its open ones."""
        kind = self._kind_of(engine)
        if engine in kind:
            kind.remove(engine)
            self._leaving.append(engine)

    def _kind_of(self, engine: Engine) -> list:
        if isinstance(engine, GenerationEngine):
            return self.generation
        return self.speech if isinstance(engine, SpeechEngine) else self.embedding

    def forget(self, engine: Engine) -> None:
        if engine in self._leaving:
            self._leaving.remove(engine)

    @property
    def all(self) -> list[Engine]:
        return [*self.generation, *self.embedding, *self.speech]

    @property
    def ready(self) -> bool:
        return all(e.ready for e in self.all)

    def broken(self, stall_timeout_s: float = 0.0) -> dict[str, str]:
        """Event loop: broken models (dead, or stalled past ``stall_timeout_s``; 0: no stall check), with why."""
        faults = {e.name: e.breaker.check(stall_timeout_s) for e in self.all}
        return {name: fault for name, fault in faults.items() if fault}

    def names(self) -> list[str]:
        return [e.name for e in self.all]

    def generator(self, name: str) -> GenerationEngine:
        if not name:
            if not self.generation:
                raise Unsupported("this server serves no generation model")
            return self._ready(self.generation[0])
        engine = self._find(name)
        if not isinstance(engine, GenerationEngine):
            kind = "a speech" if isinstance(engine, SpeechEngine) else "an embedding"
            raise Unsupported(f"model {name!r} is {kind} model; it cannot generate text")
        return self._ready(engine)

    def transcriber(self, name: str) -> SpeechEngine:
        """The named speech model, or the first one served."""
        if not name:
            if not self.speech:
                raise Unsupported("this server serves no speech model; start it with --speech-model")
            return self._ready(self.speech[0])
        engine = self._find(name)
        if not isinstance(engine, SpeechEngine):
            others = ", ".join(e.name for e in self.speech)
            raise Unsupported(f"model {name!r} does not transcribe speech; use a speech model "
                              f"({others or 'none served'})")
        return self._ready(engine)

    def embedder(self, name: str) -> EmbeddingEngine:
        """The named embedding model, or the first that embeds (rerankers and classifiers do not)."""
        return self._pooled(name, "embeds", "embedding", "pooled embedding")

    def reranker(self, name: str) -> EmbeddingEngine:
        """The named reranking model (a cross-encoder), or the first one served."""
        return self._pooled(name, "reranks", "reranking", "reranking")

    def classifier(self, name: str) -> EmbeddingEngine:
        """The named classifying model (a sequence classifier or a reranker), or the first classifier
        served with more than one label, else the first reranker."""
        if not name and (labelled := [e for e in self.embedding if e.ready and e.classifies and not e.reranks]):
            return labelled[0]
        return self._pooled(name, "classifies", "classification", "classification")

    def sparse_embedder(self, name: str) -> EmbeddingEngine:
        """The named sparse embedding model (a SPLADE model), or the first one served."""
        return self._pooled(name, "embeds_sparse", "sparse embedding", "sparse embedding")

    def _pooled(self, name: str, does: str, what: str, operation: str) -> EmbeddingEngine:
        """``does``: the EmbeddingEngine property that says the model serves the call."""
        if not name:
            loading = [e for e in self.embedding if not e.ready]
            served = [e for e in self.embedding if e.ready and getattr(e, does)]
            if not served and loading:
                return self._ready(loading[0])
            if not served:
                raise Unsupported(f"this server serves no {what} model")
            return served[0]
        engine = self._find(name)
        if not isinstance(engine, EmbeddingEngine):
            others = ", ".join(e.name for e in self.embedding if e.ready and getattr(e, does))
            raise Unsupported(f"model {name!r} has no {operation} operation; use a {what} model "
                              f"({others or 'none served'})")
        return self._ready(engine)

    def any(self, name: str) -> Engine:
        """The named model, or the default generation (else embedding) model."""
        if name:
            return self._ready(self._find(name))
        if not self.all:
            raise NotReady("no model is served")
        return self._ready(self.all[0])

    def describe_all(self) -> list[ModelDescription]:
        return [e.describe() for e in self.all if e.ready]

    def cancel(self, request_id: str, tenant: str = "") -> bool:
        """Cancels ``tenant``'s request ``request_id``."""

        return any(e.cancel(request_id, tenant) for e in [*self.all, *self._leaving])

    def _find(self, name: str) -> Engine:
        for engine in self.all:
            if engine.name == name:
                return engine
        raise ModelNotFound(name, self.names())

    @staticmethod
    def _ready(engine):
        engine.breaker.refuse()
        if not engine.ready:
            raise NotReady(f"model {engine.name!r} is not ready", retry_after_s=2.0)
        return engine


def sized_limits(engine: Engine) -> Limits:
    """The engine's limits with the zeros sized to its model's context."""
    if isinstance(engine, GenerationEngine):
        return engine.config.limits.for_context(engine.loaded.context_length)
    return engine.limits.for_context(engine.model.max_length)


def text_limit(engine: Engine) -> int:
    """The most UTF-8 bytes of text the engine tokenizes as one piece (a prompt, an input)."""
    limits = sized_limits(engine)
    return limits.max_prompt_bytes if isinstance(engine, GenerationEngine) else limits.max_embed_input_bytes
