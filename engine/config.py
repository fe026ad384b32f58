"""Every engine setting in one tree: a section per part, each declaring its own flags
(``settings.setting``) beside its fields. The command line is generated from ``SECTIONS``
and read back into an ``EngineConfig``; an in-process user builds one directly."""

from __future__ import annotations

from dataclasses import dataclass, field

from .embedding.config import EmbeddingConfig
from .generation.config import GenerationConfig, SchedulerConfig, SpeculationConfig
from .generation.grammar.formats import GrammarLimits
from .residency.config import ResidencyConfig
from .validation import Limits


@dataclass(frozen=True)
class EngineConfig:
    limits: Limits = field(default_factory=Limits)  # per request, every model kind
    generation: GenerationConfig = field(default_factory=GenerationConfig)  # its scheduler, speculation, grammar
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    residency: ResidencyConfig = field(default_factory=ResidencyConfig)  # models loaded at run time


SECTIONS: tuple[tuple[str, type], ...] = (
    ("generation models: weights, memory, adapters", GenerationConfig),
    ("scheduling", SchedulerConfig),
    ("speculative decoding", SpeculationConfig),
    ("request limits", Limits),
    ("structured output", GrammarLimits),
    ("embedding models", EmbeddingConfig),
    ("models at run time", ResidencyConfig),
)
"""The flag groups of ``mlx-grpc serve`` that the config tree declares, in help order."""
