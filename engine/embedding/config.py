"""Knobs of one embedding model's engine; ``setting`` fields are its command line."""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import setting


@dataclass(frozen=True)
class EmbeddingConfig:
    max_active: int = 64  # requests admitted at once (their inputs share forwards)
    max_queued: int = 256  # requests waiting for admission
    priority_aging_s: float = setting(5.0, "", flag="--priority-aging")  # one aging for every model kind
    batch_wait_s: float = 0.002  # a forward waits this long for more admitted inputs
    result_cache_entries: int = 4096  # results kept for repeated inputs (per model, namespaced by tenant)
    result_cache_bytes: int = 64 << 20
    precision: str = "f32"  # --embed-precision, per model
    force_precision: bool = False  # --embed-precision-force
