"""One request's state on the engine thread: the sequence, its cache and delivery.

A row is created by the engine facade, handed to the worker, prefilled in chunks,
joins the decode batch, and leaves it when it finishes or is cancelled. Only the
engine thread touches a row after submission; events leave through ``sink``.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .detokenizer import IncrementalDetokenizer
from ..events import Delta, Event, FinishReason, Finished, Started, Timings, TokenLogprob, Usage
from .sampling import RowSampler
from .stops import StopStrings


class RowStatus(enum.Enum):
    WAITING = "waiting"
    PREFILLING = "prefilling"
    DECODING = "decoding"
    FINISHED = "finished"


@dataclass(frozen=True)
class StopRule:
    """The stopping facts a row checks for every token."""

    max_tokens: int
    min_tokens: int
    eos_ids: frozenset[int]
    stop_token_ids: frozenset[int]
    ignore_eos: bool


@dataclass
class Row:
    request_id: str
    model: str
    prompt: list[int]
    rule: StopRule
    sampler: RowSampler
    detokenizer: IncrementalDetokenizer
    stops: StopStrings
    sink: Callable[[Event], None]
    release: Callable[[], None]
    top_logprobs: int = 0
    logprobs: bool = False
    use_prefix_cache: bool = True
    session_id: str = ""
    snapshot_at: int | None = None  # prompt boundary worth caching (the chat history)
    finish_reason: FinishReason | None = None
    arrived: float = field(default_factory=time.perf_counter)
    admitted: float = 0.0
    status: RowStatus = RowStatus.WAITING
    position: int = 0  # prompt tokens already in ``cache``
    cached_tokens: int = 0
    cache: list[Any] | None = None  # per-layer mlx-lm caches while prefilling
    output: list[int] = field(default_factory=list)
    cancelled: bool = False
    first_token_at: float = 0.0

    @property
    def next_input(self) -> int:
        """The token the next decode step feeds for this row."""
        return self.output[-1] if self.output else self.prompt[-1]

    @property
    def publishable(self) -> bool:
        """Finished normally, so its computed tokens are worth keeping."""
        return self.use_prefix_cache and self.finish_reason in (
            FinishReason.LENGTH, FinishReason.STOP, FinishReason.EOS)

    @property
    def step(self) -> int:
        """Index of the token the next decode step selects."""
        return len(self.output)

    def start(self) -> None:
        self.sink(Started(self.request_id, self.model, len(self.prompt), self.cached_tokens))

    def accept(self, token: int, logprob: TokenLogprob | None) -> bool:
        """Delivers one selected token; returns True when the row is finished."""
        if not self.first_token_at:
            self.first_token_at = time.perf_counter()
        rule, count = self.rule, len(self.output) + 1
        active = count > rule.min_tokens
        if active and not rule.ignore_eos and token in rule.eos_ids:
            return self._finish(FinishReason.EOS)
        if active and token in rule.stop_token_ids:
            return self._finish(FinishReason.STOP, stop_token_id=token)
        self.output.append(token)
        self.sampler.commit(token)
        text = self.detokenizer.add(token)
        stop = None
        if active:
            text, stop = self.stops.feed(text)
        self.sink(Delta((token,), text, (logprob,) if logprob else ()))
        if stop is not None:
            return self._finish(FinishReason.STOP, stop_sequence=stop, flush=False)
        if count >= rule.max_tokens:
            return self._finish(FinishReason.LENGTH)
        return False

    def cancel(self, reason: FinishReason = FinishReason.CANCELLED, error: str = "") -> None:
        self._finish(reason, error=error, flush=False)

    def _finish(self, reason: FinishReason, *, stop_sequence: str = "",
                stop_token_id: int | None = None, error: str = "", flush: bool = True) -> bool:
        if self.status is RowStatus.FINISHED:
            return True
        if flush:
            tail = self.stops.feed(self.detokenizer.flush())[0] + self.stops.flush()
            if tail:
                self.sink(Delta((), tail))
        self.status = RowStatus.FINISHED
        self.finish_reason = reason
        self.cache = None
        self.release()
        self.sink(Finished(reason, self.usage(), self.timings(), stop_sequence, stop_token_id, error))
        return True

    def usage(self) -> Usage:
        return Usage(len(self.prompt), len(self.output), self.cached_tokens)

    def timings(self) -> Timings:
        now = time.perf_counter()
        queue = (self.admitted or now) - self.arrived
        ttft = (self.first_token_at - self.arrived) if self.first_token_at else 0.0
        decode_time = now - self.first_token_at if self.first_token_at else 0.0
        rate = (len(self.output) - 1) / decode_time if decode_time > 0 and len(self.output) > 1 else 0.0
        return Timings(queue, ttft, rate, now - self.arrived)
