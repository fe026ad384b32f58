"""The engines ``mlx-grpc serve`` builds from its parsed command line: limits and models."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Callable

from engine.config import EngineConfig
from engine.embedding.config import EmbeddingConfig
from engine.embedding.engine import EmbeddingEngine
from engine.generation.config import GenerationConfig, SchedulerConfig, SpeculationConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.generation.grammar.formats import GrammarLimits
from engine.loading.embedded import default_embedding_model, default_generation_model
from engine.loading.model import default_name
from engine.models import ModelSet
from engine.requests import SpeculationMode
from engine.residency.catalog import Catalog, ModelSpec, read_catalog
from engine.residency.config import ResidencyConfig
from engine.residency.lifecycle import Lifecycle
from engine.speech.config import SpeechConfig
from engine.speech.engine import SpeechEngine
from engine.validation import Limits

from .flags import from_args

DEFAULT_GENERATION_NAME = "smollm2-135m-instruct"
DEFAULT_EMBEDDING_NAME = "all-minilm-l6-v2"


def build_limits(args: argparse.Namespace) -> Limits:
    return from_args(Limits, args)


def build_config(args: argparse.Namespace) -> EngineConfig:
    """The config tree from the parsed flags (each section's ``setting`` fields)."""
    limits = build_limits(args)
    return EngineConfig(
        limits=limits,
        generation=from_args(GenerationConfig, args, limits=limits, grammar=from_args(GrammarLimits, args),
                             scheduler=from_args(SchedulerConfig, args),
                             speculation=from_args(SpeculationConfig, args)),
        embedding=from_args(EmbeddingConfig, args, force_precision=args.embed_precision_force),
        residency=from_args(ResidencyConfig, args))


def build_models(args: argparse.Namespace) -> ModelSet:
    tree = build_config(args)
    limits, config = tree.limits, tree.generation
    specs = args.model or [(DEFAULT_GENERATION_NAME, str(default_generation_model()))]
    names = [name or default_name(source) for name, source in specs]
    adapters = adapters_by_model(args.adapter, names)
    drafts = _drafts_by_model(args.draft_model or [], names)
    if config.speculation.mode is SpeculationMode.DRAFT and len(drafts) < len(specs):
        raise SystemExit("--speculation draft needs a --draft-model for every served model")
    generation = [GenerationEngine(source, name=name, config=replace(
        config, adapters=adapters[name], draft_model=drafts.get(name)))
        for name, (_, source) in zip(names, specs)]
    embedding = []
    if not args.no_embedding:
        specs = args.embedding_model or [(DEFAULT_EMBEDDING_NAME, str(default_embedding_model()))]
        names = [name or default_name(source) for name, source in specs]
        precisions = precision_by_model(args.embed_precision, names)
        embedding = [EmbeddingEngine(source, name=name, limits=limits,
                                     config=replace(tree.embedding, precision=precisions[name]))
                     for name, (_, source) in zip(names, specs)]
    speech = [SpeechEngine(source, name=name or default_name(source), limits=limits, config=speech_config(tree))
              for name, source in args.speech_model or ()]
    return ModelSet(generation, embedding, lifecycle=lifecycle(tree), speech=speech)


def lifecycle(tree: EngineConfig) -> Lifecycle:
    """How the server loads models at run time: its flags, its catalog, and the engine factory."""
    config = tree.residency
    catalog = read_catalog(config.model_catalog, config.model_root) if config.model_catalog else Catalog()
    return Lifecycle(engine_factory(tree), config.model_root, catalog, config.models_memory_limit,
                     config.max_keep_alive_s)


def speech_config(tree: EngineConfig) -> SpeechConfig:
    return SpeechConfig(priority_aging_s=tree.embedding.priority_aging_s)  # the one aging flag of every kind


def engine_factory(tree: EngineConfig) -> Callable[[ModelSpec], GenerationEngine | EmbeddingEngine | SpeechEngine]:
    """Builds a model loaded at run time with the server's settings and its own options."""

    def make(spec: ModelSpec) -> GenerationEngine | EmbeddingEngine | SpeechEngine:
        options = spec.options
        limits = tree.limits
        if options.context_length:
            limits = replace(limits, max_prompt_tokens=options.context_length)
        if spec.kind == "embedding":
            return EmbeddingEngine(spec.source, name=spec.name, limits=limits, config=tree.embedding)
        if spec.kind == "speech":
            return SpeechEngine(spec.source, name=spec.name, limits=limits, config=speech_config(tree))
        config = tree.generation
        scheduler = replace(config.scheduler, kv_bits=options.kv_bits) if options.kv_bits else config.scheduler
        return GenerationEngine(spec.source, name=spec.name, config=replace(
            config, dtype=options.dtype or config.dtype, limits=limits, scheduler=scheduler, adapters=(),
            draft_model=options.draft_model or None))

    return make


def precision_by_model(specs: list[tuple[str, str]], names: list[str]) -> dict[str, str]:
    """--embed-precision [MODEL=]PRECISION -> {embedding model name: precision} (default f32)."""
    out = dict.fromkeys(names, "f32")
    for model, precision in specs:
        if model and model not in out:
            raise SystemExit(f"--embed-precision {model}={precision}: no embedding model is called {model!r} "
                             f"(served: {', '.join(names)})")
        for name in [model] if model else names:
            out[name] = precision
    return out


def adapters_by_model(specs: list[tuple[str, str, str]], names: list[str]) -> dict[str, tuple]:
    """Each generation model's (name, dir) adapters from ``--adapter`` values."""
    out: dict[str, list] = {name: [] for name in names}
    for model, name, path in specs:
        if (model or names[0]) not in out:
            raise ValueError(f"--adapter {model}:{name}: no generation model named {model!r} ({', '.join(names)})")
        out[model or names[0]].append((name, path))
    return {model: tuple(pairs) for model, pairs in out.items()}


def _drafts_by_model(specs: list[tuple[str, str]], served: list[str]) -> dict[str, str]:
    """--draft-model [MODEL=]SOURCE -> {served model name: draft source}."""
    drafts = {}
    for name, source in specs:
        target = name or served[0]
        if target not in served:
            raise SystemExit(f"--draft-model {name}=...: no served model is called {name!r} "
                             f"(served: {', '.join(served)})")
        drafts[target] = source
    return drafts
