"""The continuous-batching scheduler, engine thread only. One tick: prune, admit,
prefill, decode (see docs/ARCHITECTURE.md). Every started sequence is released once."""

from __future__ import annotations

import functools
import logging
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Callable

import mlx.nn as nn

from ....adapters.bank import AdapterBank
from ....caches.blocks import BlockLedger
from ....caches.disk import DiskStats, DiskTier
from ....caches.prefix import PrefixCache
from ....caches.quantized_kv import make_caches
from ....caches.sessions import Sessions
from ....events import FinishReason
from ....loading.traits import can_roll_back
from ....memory.budget import MemoryBudget
from ....memory.planner import Planner
from ....serving.protocol import Control
from ....vision import mrope
from ....vision.model import VisionTower
from ...config import SchedulerConfig
from ..decode.batch import Batch
from ..decode.step import Decoder
from ..prefill.prefiller import Prefiller, unrouted
from ..request import CoreRequest
from ..sequence.state import SequenceState, Status, failure_message
from ..speculation.drafter import Drafter, NoDrafter
from .admission import Admission
from .reuse import PrefixReuse, disk_namespace
from .throughput import TokenRate

log = logging.getLogger("engine.generation.core.scheduling.scheduler")




@dataclass(frozen=True)
class SchedulerStats:
    waiting: int
    running: int
    reserved: int  # sequences holding memory
    rows: int  # prefilling plus batch rows
    kv_bytes: int  # caches of running sequences
    reserved_bytes: int
    budget_bytes: int | None
    prefix_entries: int
    prefix_bytes: int
    prefix_hits: int
    prefix_misses: int
    prefix_memory_hits: int
    prefix_disk_hits: int
    prefix_disk: DiskStats  # zeros without a disk tier
    open_sessions: int
    generated_tokens: int
    prompt_tokens_computed: int  # prompt tokens prefill forwards have run (a request's choices share one prefill)
    recent_tokens_per_s: float  # generated over the last ``throughput.WINDOW_S`` seconds


@dataclass(frozen=True)
class Stats(Control["Scheduler", SchedulerStats]):
    """The scheduler's snapshot."""

    def answer(self, scheduler: Scheduler) -> SchedulerStats:
        return scheduler.stats()


class Scheduler:
    def __init__(self, model: nn.Module, config: SchedulerConfig, token_text: Callable[[int], str], *,
                 budget: MemoryBudget | None = None, namespace: str = "", rolls_back: bool | None = None,
                 interrupt: Callable[[str], bool] | None = None, drafter: Drafter | None = None,
                 adapters: AdapterBank | None = None, planner: Planner | None = None,
                 ledger: BlockLedger | None = None, disk: DiskTier | None = None,
                 vision: VisionTower | None = None):
        self._model = model
        self.adapters = adapters
        self._route = adapters.routed if adapters is not None else unrouted
        self._config = config
        self.planner = planner
        cache = (PrefixCache(config.prefix_cache_bytes, config.prefix_cache_entries, ledger, disk=disk,
                             spill_all=config.prefix_cache_disk_policy == "all",
                             disk_namespace=lambda ns: disk_namespace(ns, self._adapter_digest),
                             sessions=Sessions(config.session_idle_s))
                 if config.prefix_cache_bytes > 0 else None)
        self.reuse = PrefixReuse(cache, namespace)
        self.admission = Admission(config.max_active, budget, headroom=config.headroom,
                                   aging_s=config.priority_aging_s)
        self._batch = Batch(model)
        self.can_roll_back = can_roll_back(model) if rolls_back is None else rolls_back
        positions = vision is not None and vision.media_input == "embeddings+positions"
        self._drafter: Drafter = drafter if drafter is not None else NoDrafter()
        self._prefiller = Prefiller(model, config, self.reuse, self.can_roll_back, interrupt,
                                    mrope.prefill_route(self._route) if positions else self._route, vision=vision,
                                    token_text=token_text, observe=self._drafter.prefilling)
        self._decoder = Decoder(token_text, can_roll_back=self.can_roll_back, step_tokens=config.step_tokens,
                                speculation_rows=config.speculation_rows, drafter=self._drafter,
                                route=mrope.decode_route(self._route) if positions else self._route)
        self._prefilling: deque[SequenceState] = deque()
        self._decoding: list[SequenceState] = []
        self._reading: list[tuple[SequenceState, Future]] = []  # admitted; their cached prefix read off-thread
        self._forking: list[SequenceState] = []  # siblings out of their choice 0, not yet in the batch (a step)
        self.generated_tokens = 0
        self.rate = TokenRate()

    def _adapter_digest(self, key: str) -> str:
        return self.adapters.digest(key) if self.adapters is not None else ""

    @property
    def prefix_cache(self) -> PrefixCache | None:
        return self.reuse.cache

    @property
    def idle(self) -> bool:
        return not self.admission.waiting and not self._prefilling and not self._decoding and not self._reading

    def submit(self, request: CoreRequest) -> None:
        """A request off the inbox: its sequences built here, then queued for admission; a
        request that cannot be built ends alone (ERROR), never the thread."""
        try:
            seq = request.sequences()
        except Exception as exc:
            log.exception("request %s could not be built", request.request_id)
            request.finish(FinishReason.ERROR, error=f"engine failure: {type(exc).__name__}")
            return
        self.enqueue(seq)

    def enqueue(self, seq: SequenceState) -> None:
        """A built sequence (its siblings with it) waits for admission."""
        self.admission.enqueue(seq)

    def cancel(self, key: str) -> bool:
        """False if this scheduler does not hold the request."""
        if (seq := self.admission.withdraw(key)) is not None:
            seq.finish(FinishReason.CANCELLED)
            return True
        for seq in self._prefilling:
            if seq.key == key:
                self._prefilling.remove(seq)
                self._end(seq, FinishReason.CANCELLED)
                return True
        for item in self._reading:
            if item[0].key == key:
                self._reading.remove(item)
                self._end(item[0], FinishReason.CANCELLED)
                return True
        found = False
        for seq in self._decoding:  # every choice of the request
            if seq.key == key:
                seq.cancelled = True  # leaves the batch at the next prune
                found = True
        return found

    @property
    def budget(self) -> MemoryBudget | None:
        return self.admission.budget

    def tick(self) -> None:
        self._prune()
        self._admit()
        self._settle_reads()
        budget = max(self._config.tick_tokens - len(self._decoding), self._config.min_prefill_tokens)
        done, interrupted, failed = self._prefiller.run(self._prefilling, budget)
        for seq in interrupted:
            self._end(seq, FinishReason.CANCELLED)
        for seq, exc in failed:  # a row's own chunk failed: it ends alone
            log.error("request %s failed during prefill", seq.delivery.request_id, exc_info=exc)
            self._end(seq, FinishReason.ERROR, failure_message(exc))
        prompts = [self._join(seq) for seq in done]
        if self._decoding:
            forks = self._forks()
            try:
                produced = self._decoder.step(self._batch, self._decoding, forks)
            finally:  # the joined rows' first tokens go out before their prompts are stored
                self._store_prompts(prompts)
            self._fork(forks)
            self.generated_tokens += produced
            self.rate.add(produced)
            self._retire_finished()

    def fail_running(self, message: str, reason: FinishReason = FinishReason.ERROR) -> None:
        """Ends every started sequence (a failed tick); waiting ones keep their place."""
        for seq in (*self._prefilling, *self._decoding, *(seq for seq, _ in self._reading), *self._forking):
            self._end(seq, reason, message)
        self._forking = []
        self._prefilling.clear()
        self._reading = []
        self._decoding = []
        self._batch.keep([])
        self._drafter.retain([])

    def shutdown(self, message: str, reason: FinishReason = FinishReason.CANCELLED) -> None:
        """Ends everything, waiting sequences included (CANCELLED; ERROR when the thread dies);
        a clean shutdown queues the memory tier's entries for the disk tier."""
        self.fail_running(message, reason)
        if reason is FinishReason.CANCELLED:
            self.reuse.persist()
        for seq in self.admission.drain():
            seq.finish(reason, error=message)

    def stats(self) -> SchedulerStats:
        prefix, budget = self.reuse.figures(), self.admission.budget
        prefill_bytes = sum(c.nbytes for seq in self._prefilling for c in seq.caches or ())
        return SchedulerStats(
            waiting=self.admission.waiting, running=self.admission.running,
            reserved=self.admission.reserved, rows=len(self._prefilling) + self._batch.size,
            kv_bytes=self._batch.nbytes + prefill_bytes + self._drafter.nbytes,
            reserved_bytes=budget.committed_bytes if budget is not None else 0,
            budget_bytes=budget.budget_bytes if budget is not None else None,
            prefix_entries=prefix.entries, prefix_bytes=prefix.nbytes, prefix_hits=prefix.hits,
            prefix_misses=prefix.misses, prefix_memory_hits=prefix.memory_hits, prefix_disk_hits=prefix.disk_hits,
            prefix_disk=prefix.disk, open_sessions=prefix.open_sessions,
            generated_tokens=self.generated_tokens, prompt_tokens_computed=self._prefiller.computed_tokens,
            recent_tokens_per_s=self.rate.per_second())

    def _admit(self) -> None:
        while (seq := self.admission.next_ready()) is not None:
            try:
                self._start(seq)
            except Exception as exc:  # fail this request, keep serving
                log.exception("could not start request %s", seq.delivery.request_id)
                self._end(seq, FinishReason.ERROR, f"engine failure: {type(exc).__name__}")

    def _start(self, seq: SequenceState, read=None) -> None:
        min_prefix = self._prefiller.min_prefix(seq)
        if read is None and (future := self.reuse.read_ahead(seq, min_prefix)) is not None:
            self._reading.append((seq, future))  # other rows run while the disk tier reads
            return
        cached, caches = self.reuse.take(seq, min_prefix, read)
        seq.caches = caches if caches is not None else make_caches(self._model, self._config.kv_bits)
        seq.start(cached)
        self._prefilling.append(seq)

    def _settle_reads(self) -> None:
        """Starts the sequences whose disk read ended; waits a little when nothing else runs."""
        if not self._reading:
            return
        if not self._prefilling and not self._decoding:
            wait([f for _, f in self._reading], timeout=0.01, return_when=FIRST_COMPLETED)
        done = [item for item in self._reading if item[1].done()]
        for item in done:
            self._reading.remove(item)
            seq, future = item
            try:
                self._start(seq, read=future.result() or False)  # False: the read failed; take from memory
            except Exception as exc:  # fail this request, keep serving
                log.exception("could not start request %s", seq.delivery.request_id)
                self._end(seq, FinishReason.ERROR, failure_message(exc))

    def _join(self, seq: SequenceState) -> tuple[SequenceState, int, list]:
        """(seq, computed, its own caches): what ``_store_prompts`` stores after the step."""
        caches = seq.caches
        assert caches is not None  # a row joins prefilled, with its own caches
        self._batch.join(caches)  # the batch copies the row's KV
        self._drafter.join(seq)
        prompt = (seq, seq.computed, caches)
        seq.caches = None
        seq.status = Status.DECODING
        self._decoding.append(seq)
        for sibling in seq.siblings:  # they fork at its first step
            sibling.start(seq.cached)
        return prompt

    def _store_prompts(self, prompts: list[tuple[SequenceState, int, list]]) -> None:
        """Stores the prompt KV each joined row prefilled (it reached the batch as a copy), but
        not a row that ended storable in its first step: it retires now, stored whole, and with
        plain KV and no disk tier that longer entry would drop this one at once."""
        whole = self.can_roll_back and (self.reuse.cache is None or self.reuse.cache.disk is None)
        for seq, computed, caches in prompts:
            if computed > 0 and not (whole and seq.finished and seq.storable):
                self.reuse.store(seq, seq.tokens[:computed], caches)

    def _forks(self) -> list[tuple[int, SequenceState]]:
        """(row, sibling) of the rows taking their first step with siblings, now on their own."""
        forks = []
        for i, seq in enumerate(self._decoding):
            if seq.siblings and not seq.finished:
                forks += [(i, sibling) for sibling in seq.siblings if not sibling.finished]
                seq.siblings = []
        self._forking = [sibling for _, sibling in forks]
        return forks

    def _fork(self, forks: list[tuple[int, SequenceState]]) -> None:
        """Each sibling joins the batch with a copy of its row's KV for the whole prompt (the step
        drew its first token from that row's scores), or, already finished, is released."""
        copies: dict[int, list] = {}
        for i, sibling in forks:
            if sibling.finished:
                self.admission.release(sibling)
                continue
            if i not in copies:
                copies[i] = self._batch.extract(i)
            self._batch.join(copies[i])
            self._drafter.join(sibling)
            sibling.status = Status.DECODING
            self._decoding.append(sibling)
        self._forking = []

    def _prune(self) -> None:
        for seq in self._decoding:
            if seq.cancelled:
                seq.finish(FinishReason.CANCELLED)
        self._retire_finished()

    def _retire_finished(self) -> None:
        """Normal endings are stored for reuse before they leave the batch."""
        keep = [i for i, seq in enumerate(self._decoding) if not seq.finished]
        if len(keep) == len(self._decoding):
            return
        for i, seq in enumerate(self._decoding):
            if seq.finished:
                if seq.storable:
                    self.reuse.store(seq, seq.tokens[: seq.computed], functools.partial(self._batch.extract, i))
                self.admission.release(seq)
        self._batch.keep(keep)
        self._decoding = [self._decoding[i] for i in keep]
        self._drafter.retain(self._decoding)

    def _end(self, seq: SequenceState, reason: FinishReason, error: str = "") -> None:
        seq.finish(reason, error=error)
        seq.caches = None
        self.admission.release(seq)
