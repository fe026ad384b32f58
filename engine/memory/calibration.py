"""Single-stream decode speed of a loaded model, measured at load.

Model: ``step_seconds = overhead_seconds + (weights + kv_read(context)) / bandwidth``.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from ..hardware.machine import measure_matvec_bandwidth
from .facts import ModelMemoryFacts
from .plan import kv_read_bytes

__all__ = ["DecodeCalibration", "calibrate_decode", "measure_decode_step"]

log = logging.getLogger("engine.memory.calibration")

_CONTEXT = 16
#: One calibration at a time: concurrent timings would each see half the machine.
_LOCK = threading.Lock()


@dataclass(frozen=True)
class DecodeCalibration:
    """One decode step's cost: a read at ``bandwidth`` bytes/s plus ``overhead_seconds``."""

    bandwidth: float
    overhead_seconds: float
    step_seconds: float
    context: int

    def tokens_per_second(self, read_bytes: int) -> float:
        """Decode rate when a step reads ``read_bytes`` (weights plus attended KV)."""
        return 1.0 / (self.overhead_seconds + read_bytes / self.bandwidth)


def measure_decode_step(model: nn.Module, *, context: int = _CONTEXT, steps: int = 8, warmup: int = 2) -> float:
    """Median seconds of one greedy single-token step at ``context`` tokens of cache."""
    from mlx_lm.models.cache import make_prompt_cache

    caches = make_prompt_cache(model)
    mx.eval(model(mx.zeros((1, context), dtype=mx.int32), cache=caches))
    token = mx.zeros((1, 1), dtype=mx.int32)
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        token = mx.argmax(model(token, cache=caches)[:, -1, :], axis=-1, keepdims=True)
        mx.eval(token)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    del caches
    mx.clear_cache()
    return statistics.median(times)


def calibrate_decode(model: nn.Module, facts: ModelMemoryFacts) -> DecodeCalibration | None:
    """Measures bandwidth and per-step overhead; None (logged) if the model cannot be stepped so."""
    try:
        with _LOCK:
            bandwidth = measure_matvec_bandwidth()
            step = measure_decode_step(model)
    except Exception:  # an architecture needing other inputs: no calibration
        log.warning("decode calibration failed; PlanMemory predicts from bandwidth alone", exc_info=True)
        return None
    read = facts.weights_bytes + kv_read_bytes(facts, _CONTEXT)
    # The step itself read at least this fast.
    bandwidth = max(bandwidth, read / step)
    overhead = step - read / bandwidth
    log.info("decode calibration: %.1f GB/s, step %.1f ms at %d tokens (%.1f ms beyond reading)",
             bandwidth / 1e9, step * 1e3, _CONTEXT, overhead * 1e3)
    return DecodeCalibration(bandwidth, overhead, step, _CONTEXT)
