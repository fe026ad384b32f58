"""Knobs of one model's generation engine (all settable from the command line)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..requests import SpeculationMode
from ..validation import Limits
from .grammar.formats import GrammarLimits


@dataclass(frozen=True)
class SchedulerConfig:
    """How one model's engine thread schedules work."""

    # sequences prefilling or decoding at once (admission capacity; memory admits too)
    max_active: int = 32
    max_queued: int = 64  # requests waiting beyond those before RESOURCE_EXHAUSTED
    prefill_chunk: int = 256  # prompt tokens per prefill forward
    tick_tokens: int = 512  # tokens one tick may process (decode rows + prefill)
    min_prefill_tokens: int = 16  # prefill progress guaranteed per tick
    prefix_cache_bytes: int = 512 << 20  # 0 turns the prefix cache off
    prefix_cache_entries: int = 64
    prefill_batch: int = 8  # short fresh prompts prefilled together in one forward (1: off)
    step_tokens: int = 16  # tokens a decode step may feed in all when rows speculate (pending + drafts)
    # rows speculate only in steps of at most this many rows: rows that keep different
    # numbers of positions make mlx-lm's right-aligned batch cache roll (copy) the whole
    # batch's KV, which on a CPU costs more than the drafts save (docs/PERFORMANCE.md)
    speculation_rows: int = 1
    # waiting requests gain one priority level per this many seconds (0: no aging)
    priority_aging_s: float = 5.0
    # rows a tenant below its weighted share may start beyond max_active (-1: max(1, max_active // 8))
    fair_headroom: int = -1

    @property
    def headroom(self) -> int:
        return self.fair_headroom if self.fair_headroom >= 0 else max(1, self.max_active // 8)


@dataclass(frozen=True)
class SpeculationConfig:
    """Speculative decoding defaults (requests may ask for less, or turn it off)."""

    mode: SpeculationMode = SpeculationMode.NGRAM  # used when a request leaves the mode unset
    num_draft_tokens: int = 4  # drafts per step when a request leaves it unset
    max_draft_tokens: int = 8  # the most a request may ask for


@dataclass(frozen=True)
class GenerationConfig:
    dtype: str = "auto"
    dequantize: bool = False  # hold quantized checkpoints (GGUF blocks, MLX quantized) as floats of dtype
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    limits: Limits = field(default_factory=Limits)
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)
    memory_limit_bytes: int | None = None  # None: what this machine has available
    memory_reserve_bytes: int | None = None  # None: max(256 MiB, 5% of usable)
    adapters: tuple[tuple[str, str], ...] = ()  # (name, directory) loaded at start
    max_adapters: int = 8  # adapters loaded at once; beyond it the least recently used idle one goes
    adapter_root: str | None = None  # LoadAdapter paths lie inside it; None: LoadAdapter is refused
    max_adapter_rank: int = 256  # the highest LoRA/DoRA rank an adapter may have
    max_adapter_bytes: int = 1 << 30  # tensor bytes an adapter's safetensors file may hold
    draft_model: str | None = None  # a model with the same tokenizer, for SPECULATION_MODE_DRAFT
    grammar: GrammarLimits = field(default_factory=GrammarLimits)  # what one response_format may cost
