"""Memory plans computed from facts about the loaded model and this machine.

Port of the seed's ``contracts/portable/memory-plan.ts`` (``MemoryPlan``), with
the accounting behind it. Every figure comes from something measured:

* weights: the ``nbytes`` of the arrays the model actually holds;
* KV cache: per layer, the bytes one token occupies in that layer's real cache
  object (read off a one-token forward through a fresh ``make_prompt_cache``),
  the layer's sliding window (``RotatingKVCache.max_size``), and the 256-token
  steps mlx-lm's caches grow in;
* transient workspace: one prefill chunk's activations and attention scores, the
  logits of the positions actually sampled, and the copies cache growth makes;
* usable memory: the process's memory limit (cgroup, Metal working set, RAM)
  and what the rest of the machine leaves free;
* decode rate: this machine's measured read bandwidth.

``MemoryGate`` applies the same accounting to admission: a request whose
context can never fit is refused at once; one that is only short for now waits.

No gRPC here: the service maps ``MemoryPlan`` onto ``mlxgrpc.v1.MemoryPlan``.

This module only re-exports; the parts live in ``memory_facts`` (the model's
facts), ``machine`` (usable memory, bandwidth, allocator cache),
``memory_plan`` (the accounting and ``plan_memory``) and ``memory_gate``
(admission).
"""

from __future__ import annotations

from .machine import (
    MIB,
    allocator_cache_limit,
    measure_read_bandwidth,
    usable_memory,
)
from .memory_facts import (
    KV_STEP,
    ModelMemoryFacts,
    facts_from_model,
)
from .memory_gate import MemoryGate, Reservation
from .memory_plan import (
    STRATEGY,
    MemoryPlan,
    default_reserve,
    kv_bytes,
    kv_read_bytes,
    plan_memory,
    transient_bytes,
)

__all__ = [
    "KV_STEP",
    "MIB",
    "STRATEGY",
    "MemoryGate",
    "MemoryPlan",
    "ModelMemoryFacts",
    "Reservation",
    "allocator_cache_limit",
    "default_reserve",
    "facts_from_model",
    "kv_bytes",
    "kv_read_bytes",
    "measure_read_bandwidth",
    "plan_memory",
    "transient_bytes",
    "usable_memory",
]
