"""The engines ``mlx-grpc serve`` builds from its parsed command line: limits and models."""

from __future__ import annotations

import argparse
from dataclasses import replace

from engine.embedding.engine import EmbeddingEngine
from engine.generation.config import GenerationConfig, SchedulerConfig, SpeculationConfig
from engine.generation.engine import GenerationEngine
from engine.generation.grammar.formats import GrammarLimits
from engine.loading.embedded import default_embedding_model, default_generation_model
from engine.loading.model import default_name
from engine.models import ModelSet
from engine.requests import SpeculationMode
from engine.validation import Limits

DEFAULT_GENERATION_NAME = "smollm2-135m-instruct"
DEFAULT_EMBEDDING_NAME = "all-minilm-l6-v2"


def build_limits(args: argparse.Namespace) -> Limits:
    return Limits(max_tokens=args.max_tokens, max_prompt_tokens=args.max_prompt_tokens,
                  max_prompt_bytes=args.max_prompt_bytes, max_chat_messages=args.max_chat_messages,
                  max_top_logprobs=args.max_top_logprobs, max_stop_strings=args.max_stop_strings,
                  max_logit_bias=args.max_logit_bias, max_stop_token_ids=args.max_logit_bias,
                  max_embed_inputs=args.max_embed_inputs, max_embed_input_bytes=args.max_embed_input_bytes)


def build_models(args: argparse.Namespace) -> ModelSet:
    limits = build_limits(args)
    config = GenerationConfig(
        dtype=args.dtype, dequantize=args.dequantize, limits=limits, memory_limit_bytes=args.memory_limit,
        memory_reserve_bytes=args.memory_reserve,
        grammar=GrammarLimits(max_bytes=args.max_format_bytes, compile_timeout_s=args.format_compile_timeout,
                             compile_queue=args.format_compile_queue),
        scheduler=SchedulerConfig(max_active=args.max_active, max_queued=args.max_queued,
                                  prefill_chunk=args.prefill_chunk, tick_tokens=args.tick_tokens,
                                  min_prefill_tokens=args.min_prefill_tokens, prefill_batch=args.prefill_batch,
                                  prefix_cache_bytes=args.prefix_cache_bytes, step_tokens=args.step_tokens,
                                  speculation_rows=args.speculation_rows,
                                  priority_aging_s=args.priority_aging, fair_headroom=args.fair_headroom),
        speculation=SpeculationConfig(SpeculationMode(args.speculation), args.num_draft_tokens))
    specs = args.model or [(DEFAULT_GENERATION_NAME, str(default_generation_model()))]
    names = [name or default_name(source) for name, source in specs]
    adapters = adapters_by_model(args.adapter, names)
    drafts = _drafts_by_model(args.draft_model or [], names)
    if args.speculation == "draft" and len(drafts) < len(specs):
        raise SystemExit("--speculation draft needs a --draft-model for every served model")
    generation = [GenerationEngine(source, name=name, config=replace(
        config, adapters=adapters[name], max_adapters=args.max_adapters, draft_model=drafts.get(name),
        adapter_root=args.adapter_root, max_adapter_rank=args.max_adapter_rank,
        max_adapter_bytes=args.max_adapter_bytes))
        for name, (_, source) in zip(names, specs)]
    embedding = []
    if not args.no_embedding:
        specs = args.embedding_model or [(DEFAULT_EMBEDDING_NAME, str(default_embedding_model()))]
        embedding = [EmbeddingEngine(source, name=name, limits=limits, priority_aging_s=args.priority_aging)
                     for name, source in specs]
    return ModelSet(generation, embedding)


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
