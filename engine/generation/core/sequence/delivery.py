"""What the client sees of one sequence: one Started (choice 0's only), Deltas, one Finished,
each Delta and Finished tagged with the sequence's choice. Nothing
here blocks; times are ``time.perf_counter`` readings, as the facade's arrival. Text is
detokenized incrementally, matching ``tokenizer.decode(all_tokens)``; an incomplete
UTF-8 character (U+FFFD) is held back until a later token completes it, but never more than
``MAX_PENDING`` tokens: past that, text that further tokens no longer change is emitted (bytes
that can never complete stay U+FFFD, as the whole decode shows them)."""

from __future__ import annotations

import time
from typing import Callable, Sequence

from ....events import Delta, Event, Finished, FinishReason, PromptLogprobs, Started, Timings, TokenLogprob, Usage
from .stopping import StopStringMatcher

_CONTEXT = 4  # prompt tokens kept so the first output token decodes with its left context
MAX_PENDING = 8  # tokens held back behind a trailing U+FFFD before the stable part is emitted
_KEEP = 4  # tokens kept pending then: a UTF-8 character needs at most 3 bytes after its first


class IncrementalDetokenizer:
    def __init__(self, decode: Callable[[list[int]], str], prompt: Sequence[int] = ()):
        self._decode = decode
        self._tokens = list(prompt[-_CONTEXT:])
        self._prefix = 0
        self._read = len(self._tokens)

    def add(self, token: int) -> str:
        """The text ``token`` completes (possibly empty)."""
        self._tokens.append(token)
        before = self._decode(self._tokens[self._prefix : self._read])
        after = self._decode(self._tokens[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._tokens)
            return after[len(before) :]
        if len(self._tokens) - self._read > MAX_PENDING:
            return self._advance(before, after)
        return ""

    def _advance(self, before: str, after: str) -> str:
        """Emits the text of all but the last ``_KEEP`` tokens when the later tokens did not change
        it (a U+FFFD there is final: the bytes that follow it did not complete it)."""
        split = len(self._tokens) - _KEEP
        stable = self._decode(self._tokens[self._prefix : split])
        if len(stable) < len(before) or not after.startswith(stable):
            return ""
        self._prefix, self._read = self._read, split
        return stable[len(before) :]

    def flush(self) -> str:
        """Text still held back."""
        before = self._decode(self._tokens[self._prefix : self._read])
        after = self._decode(self._tokens[self._prefix :])
        self._prefix = self._read = len(self._tokens)
        return after[len(before) :]


class Delivery:
    def __init__(self, request_id: str, model: str, sink: Callable[[Event], None],
                 detokenizer: IncrementalDetokenizer, stop_strings: StopStringMatcher, arrived: float,
                 choice: int = 0):
        self.request_id, self.model = request_id, model
        self.choice = choice
        self._sink = sink
        self._detokenizer = detokenizer
        self._stop_strings = stop_strings
        self.arrived = arrived
        self.admitted = 0.0
        self.first_token_at = 0.0
        self.finished = False

    def started(self, prompt_tokens: int, cached_tokens: int) -> None:
        self.admitted = time.perf_counter()
        if self.choice == 0:  # one Started per request
            self._sink(Started(self.request_id, self.model, prompt_tokens, cached_tokens))

    def prompt_logprobs(self, tokens: Sequence[TokenLogprob], first_token_id: int) -> None:
        """The prompt's logprobs (tokens 1 to n-1), once, after Started and before any Delta."""
        self._sink(PromptLogprobs(tuple(tokens), first_token_id))

    def mark_token(self) -> None:
        """A token was chosen: the first call stops the TTFT clock."""
        if not self.first_token_at:
            self.first_token_at = time.perf_counter()

    def text(self, token: int, stops_active: bool) -> tuple[str, str | None]:
        """(text ``token`` completes that may be emitted, matched stop string or None)."""
        text = self._detokenizer.add(token)
        return self._stop_strings.feed(text) if stops_active else (text, None)

    def delta(self, token_ids: Sequence[int], text: str, logprobs: Sequence[TokenLogprob] = ()) -> None:
        if token_ids or text:
            self._sink(Delta(tuple(token_ids), text, tuple(logprobs), choice=self.choice))

    def finish(self, reason: FinishReason, usage: Usage, *, stop_sequence: str = "",
               stop_token_id: int | None = None, error: str = "", flush: bool = True) -> None:
        """Held-back text (when ``flush``), then Finished; once only."""
        if self.finished:
            return
        self.finished = True
        if flush:
            tail = self._stop_strings.feed(self._detokenizer.flush())[0] + self._stop_strings.flush()
            self.delta((), tail)
        self._sink(Finished(reason, usage, self.timings(usage.completion_tokens), stop_sequence,
                            stop_token_id, error, choice=self.choice))

    def timings(self, completion_tokens: int) -> Timings:
        now = time.perf_counter()
        queue = (self.admitted or now) - self.arrived
        ttft = (self.first_token_at - self.arrived) if self.first_token_at else 0.0
        decode_time = now - self.first_token_at if self.first_token_at else 0.0
        rate = (completion_tokens - 1) / decode_time if decode_time > 0 and completion_tokens > 1 else 0.0
        return Timings(queue, ttft, rate, now - self.arrived)
