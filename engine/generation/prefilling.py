"""Prompts into their sequences' own caches, chunk by chunk, within a token budget.

The head of the prefilling queue advances one planned step at a time
(``next_prefill_step`` with a tail split: the last prompt token is left pending for
the batch's first step, which chooses token zero). Leading short fresh prompts (the
whole prompt but its last token fits one chunk, nothing cached, plain KV caches)
go through the model together in one left-padded forward. A step that ends at a
chat's history boundary stores a copy of the caches for reuse.
"""

from __future__ import annotations

import copy
from collections import deque

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache

from .config import SchedulerConfig
from .prefill import StepKind, next_prefill_step
from .reuse import PrefixReuse
from .sequence import Sequence


class Prefiller:
    def __init__(self, model: nn.Module, config: SchedulerConfig, reuse: PrefixReuse, plain_kv: bool):
        self._model = model
        self._config = config
        self._reuse = reuse
        self._plain_kv = plain_kv  # every layer a KVCache: short prompts may share a forward

    def run(self, queue: deque[Sequence], budget: int) -> list[Sequence]:
        """Spends up to ``budget`` prompt tokens on the queue, head first. Returns the
        sequences whose prompt is done, taken out of the queue in order."""
        done: list[Sequence] = []
        while queue and budget > 0:
            group = self._short_fresh(queue, budget)
            if len(group) >= 2:
                budget -= self._together(group)
                continue
            seq = queue[0]
            snapshot_at = seq.reuse.snapshot_at if self._reuse.applies(seq) else None
            step = next_prefill_step(seq.prompt_len, seq.computed,
                                     min(self._config.prefill_chunk, budget), True, snapshot_at)
            if step.kind is StepKind.FINAL:
                done.append(queue.popleft())
                continue
            self._model(mx.array(seq.tokens[step.start : step.end], dtype=mx.int32)[None], cache=seq.caches)
            mx.eval([c.state for c in seq.caches])
            seq.computed = step.end
            budget -= step.size
            if step.snapshot:
                self._reuse.store(seq, seq.tokens[: step.end], copy.deepcopy(seq.caches))
        return done

    def _short_fresh(self, queue: deque[Sequence], budget: int) -> list[Sequence]:
        """Leading sequences whose prompt but the last token fits one chunk, with nothing
        computed yet and no snapshot boundary inside."""
        if not self._plain_kv:
            return []
        group: list[Sequence] = []
        used = 0
        for seq in queue:
            n = seq.prompt_len - 1
            boundary = seq.reuse.snapshot_at
            if (len(group) >= self._config.prefill_batch or seq.computed != 0 or n < 1
                    or n > self._config.prefill_chunk or used + n > budget
                    or (boundary is not None and 0 < boundary < n)):
                break
            group.append(seq)
            used += n
        return group

    def _together(self, group: list[Sequence]) -> int:
        """One left-padded [B, L] forward over the group's prompts but their last token;
        each sequence gets its own caches back."""
        lengths = [seq.prompt_len - 1 for seq in group]
        width = max(lengths)
        pads = [width - n for n in lengths]
        ids = [[0] * p + seq.tokens[:n] for seq, p, n in zip(group, pads, lengths)]
        caches = [BatchKVCache(pads) for _ in group[0].caches]
        self._model(mx.array(ids, dtype=mx.int32), cache=caches)
        mx.eval([c.state for c in caches])
        for i, (seq, n) in enumerate(zip(group, lengths)):
            seq.caches = [c.extract(i) for c in caches]
            seq.computed = n
        return sum(lengths)
