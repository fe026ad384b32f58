"""The continuous-batching scheduler. Runs only on the engine thread.

One ``tick``:
  1. prune   - cancelled rows leave the prefill queue or the decode batch (their KV
               is freed and their admission lease released);
  2. prefill - the token budget left after one token per decoding row is spent on
               prompt chunks planned by ``next_prefill_step`` (tail split: the last
               prompt token is fed by the decode step); leading short fresh prompts
               (one chunk each) are prefilled together in one left-padded forward;
               a row whose prompt is done joins the decode batch;
  3. decode  - one batched forward over every decoding row, per-row selection,
               delivery and stop checks; finished rows leave the batch.
The prefix cache is consulted when a row is added (its prefill starts after the
longest cached prefix) and fed three ways: at a snapshot boundary during prefill
(a copy), when a row joins the batch (its own prefill caches, transferred), and
when a row finishes (its KV extracted from the batch: prompt plus output).
A long prompt therefore advances chunk by chunk between decode steps and never
stalls running streams.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache, KVCache, make_prompt_cache

from .batch import DecodeBatch
from ..events import FinishReason
from .prefill import PrefillPolicy, StepKind, next_prefill_step
from ..caches.prefix import PrefixCache
from .row import Row, RowStatus
from .sampling import greedy_tokens, token_logprobs

log = logging.getLogger("engine.generation.scheduler")


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits of one model's scheduler (all configurable from the command line)."""

    max_active: int = 8  # rows prefilling or decoding at once (admission capacity)
    max_queued: int = 64  # requests waiting for admission before RESOURCE_EXHAUSTED
    prefill_chunk: int = 256  # prompt tokens per prefill forward
    tick_tokens: int = 512  # tokens one tick may process (decode rows + prefill)
    min_prefill_tokens: int = 16  # prefill progress guaranteed per tick
    prefix_cache_bytes: int = 512 << 20  # 0 turns the prefix cache off
    prefix_cache_entries: int = 64
    prefill_batch: int = 8  # short fresh prompts prefilled together in one forward (1: off)


class Scheduler:
    def __init__(self, model: nn.Module, config: SchedulerConfig, policy: PrefillPolicy,
                 token_text: Callable[[int], str], namespace: str = ""):
        self._model = model
        self._namespace = namespace
        self.prefix_cache = (PrefixCache(config.prefix_cache_bytes, config.prefix_cache_entries)
                             if config.prefix_cache_bytes > 0 else None)
        self._config = config
        self._policy = policy
        self._token_text = token_text
        self._batch = DecodeBatch(model)
        self._prefilling: deque[Row] = deque()
        self._decoding: list[Row] = []

    @property
    def idle(self) -> bool:
        return not self._prefilling and not self._decoding

    @property
    def active(self) -> int:
        return len(self._prefilling) + len(self._decoding)

    @property
    def kv_bytes(self) -> int:
        return self._batch.nbytes

    def add(self, row: Row) -> None:
        row.admitted = time.perf_counter()
        hit = None
        if row.use_prefix_cache and self.prefix_cache is not None:
            hit = self.prefix_cache.take(row.prompt, self._namespace, row.session_id)
        if hit is not None:
            row.cache, row.position = hit.caches, len(hit.tokens)
            row.cached_tokens = row.position
        else:
            row.cache = make_prompt_cache(self._model)
        row.status = RowStatus.PREFILLING
        row.start()
        self._prefilling.append(row)

    def cancel(self, request_id: str) -> bool:
        for row in (*self._prefilling, *self._decoding):
            if row.request_id == request_id:
                row.cancelled = True
                return True
        return False

    def tick(self) -> None:
        self._prune()
        budget = max(self._config.tick_tokens - len(self._decoding), self._config.min_prefill_tokens)
        self._prefill(budget)
        if self._decoding:
            self._decode()

    def _publish_finished(self) -> None:
        """Stores the KV of rows that finished normally (prompt plus output)."""
        if self.prefix_cache is None or self._batch.caches is None:
            return
        for i, row in enumerate(self._decoding):
            if row.status is RowStatus.FINISHED and row.publishable:
                caches = [c.extract(i) for c in self._batch.caches]
                fed = caches[0].offset
                self.prefix_cache.put((row.prompt + row.output)[:fed], caches, self._namespace,
                                      row.session_id)

    def fail_all(self, message: str, reason: FinishReason = FinishReason.ERROR) -> None:
        """Ends every row (engine failure or shutdown) and drops the batch."""
        for row in (*self._prefilling, *self._decoding):
            row.cancel(reason, message)
        self._prefilling.clear()
        self._decoding = []
        self._batch.keep([])

    def _prune(self) -> None:
        for row in [r for r in self._prefilling if r.cancelled]:
            self._prefilling.remove(row)
            row.cancel()
        if any(r.cancelled for r in self._decoding):
            for row in self._decoding:
                if row.cancelled:
                    row.cancel()
            self._retain_unfinished()

    def _prefill(self, budget: int) -> None:
        while self._prefilling and budget > 0:
            group = self._short_fresh_rows(budget)
            if len(group) >= 2:
                budget -= self._prefill_together(group)
                continue
            row = self._prefilling[0]
            chunk = min(self._policy.chunk_size(len(row.prompt)), budget)
            snapshot_at = row.snapshot_at if row.use_prefix_cache and self.prefix_cache is not None else None
            step = next_prefill_step(len(row.prompt), row.position, chunk, True, snapshot_at)
            if step.kind is StepKind.FINAL:
                self._prefilling.popleft()
                self._join(row)
                continue
            tokens = mx.array(row.prompt[step.start : step.end], dtype=mx.int32)[None]
            self._model(tokens, cache=row.cache)
            mx.eval([c.state for c in row.cache])
            row.position = step.end
            budget -= step.end - step.start
            if step.snapshot:
                self.prefix_cache.put(row.prompt[: step.end], copy.deepcopy(row.cache),
                                      self._namespace, row.session_id)

    def _short_fresh_rows(self, budget: int) -> list[Row]:
        """Leading rows whose whole prompt but the last token fits one chunk, with nothing
        cached yet, plain KVCaches and no snapshot boundary inside: prefilled together."""
        group: list[Row] = []
        used = 0
        for row in self._prefilling:
            n = len(row.prompt) - 1
            if (len(group) >= self._config.prefill_batch or row.position != 0 or n < 1
                    or n > self._policy.chunk_size(len(row.prompt)) or used + n > budget
                    or not all(type(c) is KVCache for c in row.cache)
                    or (row.snapshot_at is not None and 0 < row.snapshot_at < n)):
                break
            group.append(row)
            used += n
        return group

    def _prefill_together(self, rows: list[Row]) -> int:
        """One left-padded [B, L] forward over ``rows``' prompts (all but the last
        token, as the tail split wants); each row gets its own KVCache back."""
        lengths = [len(r.prompt) - 1 for r in rows]
        width = max(lengths)
        pads = [width - n for n in lengths]
        ids = [[0] * p + r.prompt[:n] for r, p, n in zip(rows, pads, lengths)]
        caches = [BatchKVCache(pads) for _ in rows[0].cache]
        self._model(mx.array(ids, dtype=mx.int32), cache=caches)
        mx.eval([c.state for c in caches])
        for i, (row, n) in enumerate(zip(rows, lengths)):
            row.cache = [c.extract(i) for c in caches]
            row.position = n
        return sum(lengths)

    def _join(self, row: Row) -> None:
        self._batch.join(row.cache)  # the batch copies the row's KV
        if row.use_prefix_cache and self.prefix_cache is not None and row.position > 0:
            self.prefix_cache.put(row.prompt[: row.position], row.cache, self._namespace, row.session_id)
        row.cache = None
        row.status = RowStatus.DECODING
        self._decoding.append(row)

    def _decode(self) -> None:
        rows = self._decoding
        logits = self._batch.forward([r.next_input for r in rows])
        greedy = greedy_tokens(logits)
        sampled = {i: r.sampler.select(logits[i], r.step)
                   for i, r in enumerate(rows) if not r.sampler.is_plain_greedy}
        mx.eval(greedy, *sampled.values())
        tokens = greedy.tolist()
        for i, value in sampled.items():
            tokens[i] = value.item()
        for i, (row, token) in enumerate(zip(rows, tokens)):
            logprob = None
            if row.logprobs:
                logprob = token_logprobs(logits[i], token, row.top_logprobs, self._token_text)
            row.accept(token, logprob)
        self._retain_unfinished()

    def _retain_unfinished(self) -> None:
        keep = [i for i, r in enumerate(self._decoding) if r.status is not RowStatus.FINISHED]
        if len(keep) != len(self._decoding):
            self._publish_finished()
            self._batch.keep(keep)
            self._decoding = [self._decoding[i] for i in keep]
