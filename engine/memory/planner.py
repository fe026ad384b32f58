"""The memory plan of a loaded model on its engine thread: its budget's figures now
(loaded adapters count as weights) with what load measured and this machine."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from ..serving.protocol import Control
from .budget import MemoryBudget
from .calibration import DecodeCalibration
from .plan import MemoryPlan, plan_memory


@dataclass(frozen=True)
class Planner:
    decode: DecodeCalibration | None
    machine_total: int | None
    context_limit: int

    def plan(self, budget: MemoryBudget, context_tokens: int, max_generation_tokens: int = 0) -> MemoryPlan:
        adapters = budget.resident_bytes
        facts = dataclasses.replace(budget.facts, weights_bytes=budget.facts.weights_bytes + adapters)
        plan = plan_memory(facts, context_tokens=context_tokens or self.context_limit,
                           max_generation_tokens=max_generation_tokens, prefill_chunk=budget.prefill_chunk,
                           usable=budget.usable_bytes, reserve_bytes=budget.reserve_bytes,
                           machine_total=self.machine_total, decode=self.decode, context_limit=self.context_limit)
        return dataclasses.replace(plan, adapter_bytes=adapters)


class Plans(Protocol):
    """An engine thread's scheduler, as a memory plan reads it."""

    @property
    def planner(self) -> Planner | None: ...
    @property
    def budget(self) -> MemoryBudget | None: ...


@dataclass(frozen=True)
class PlanMemory(Control[Plans, MemoryPlan]):
    """The plan for ``context_tokens`` (0: the model's context length)."""

    context_tokens: int
    max_generation_tokens: int = 0

    def answer(self, scheduler: Plans) -> MemoryPlan:
        if scheduler.planner is None or scheduler.budget is None:
            raise RuntimeError("this engine thread plans no memory")
        return scheduler.planner.plan(scheduler.budget, self.context_tokens, self.max_generation_tokens)
