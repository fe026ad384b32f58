"""What a generation engine's load gives: one immutable bundle, built on the engine thread
and published to the event loop once, through the thread's ``ready`` future.

Invariants: nothing here is reassigned after load; the budget is the one shared mutable
part (the engine thread commits to it, the event loop reads only its fixed facts)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from ..loading.model import LoadedModel, load_generation_model
from ..memory.budget import MemoryBudget
from ..memory.calibration import DecodeCalibration, calibrate_decode
from ..memory.facts import ModelMemoryFacts
from ..memory.served import served_facts, with_served_draft, with_served_head
from .config import GenerationConfig
from .core.speculation.draft import check_draft
from .core.speculation.heads import DraftHead, load_head
from .frontend.chat.syntax import ChatSyntax, chat_syntax
from .frontend.prompts import PromptEncoder
from .grammar.compiler import Grammars, grammar_tokenizer


@dataclass(frozen=True)
class Loaded:
    model: LoadedModel
    facts: ModelMemoryFacts  # the model's, with its draft's or head's
    budget: MemoryBudget
    grammars: Grammars
    syntax: ChatSyntax
    prompts: PromptEncoder
    decode: DecodeCalibration | None  # the decode rate calibrated at load
    draft: LoadedModel | None = None  # a draft model, or
    head: DraftHead | None = None  # a draft head instead: MTP layers or an EAGLE-3 head

    @property
    def rolls_back(self) -> bool:
        return self.model.traits.can_roll_back

    @property
    def draft_name(self) -> str:
        return self.draft.name if self.draft else self.head.name if self.head else ""


def load_engine(source: str, name: str, config: GenerationConfig) -> Loaded:
    """Engine thread: the model, its draft or head, and what serving it needs."""
    loaded = load_generation_model(source, name=name, dtype=config.dtype, dequantize=config.dequantize,
                                   numerics=config.numerics)
    facts = served_facts(loaded, config.scheduler.kv_bits)
    decode = calibrate_decode(loaded.model, facts)
    head = load_head(config.draft_model, loaded) if config.draft_model else None
    draft = None
    if head is not None:
        facts = with_served_head(facts, head)
    elif config.draft_model:
        draft = load_generation_model(config.draft_model, dtype=config.dtype, dequantize=config.dequantize,
                                      numerics=config.numerics)
        check_draft(loaded.tokenizer, draft.tokenizer, draft.traits.can_roll_back, (loaded.name, draft.name))
        facts = with_served_draft(facts, draft)
    budget = MemoryBudget(facts, usable=config.memory_limit_bytes, reserve_bytes=config.memory_reserve_bytes,
                          prefill_chunk=config.scheduler.prefill_chunk)
    syntax = chat_syntax(loaded.tokenizer)
    # Last: its compile pool is closed by the engine only once this load has returned.
    grammars = Grammars(None, config.grammar, build=partial(grammar_tokenizer, loaded.tokenizer, loaded.vocab_size,
                                                            loaded.eos_ids))
    return Loaded(loaded, facts, budget, grammars, syntax, PromptEncoder(loaded, config.limits, syntax), decode,
                  draft, head)
