"""Response formats compiled into llguidance matchers on a pool of their own, never on
the event loop or the engine thread. A busy pool is overload (``CompilerBusy``), not
bad input. Cached matchers never advance: each request gets a copy."""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from llguidance import LLMatcher, LLTokenizer

from ...caches.objects import ObjectCache
from ...errors import CompilerBusy, InvalidRequest, Unsupported
from ...requests import FormatKind, ResponseFormat
from .constraint import Constraint, GrammarStats, matcher_error
from .formats import GrammarLimits, field_name, grammar_text

log = logging.getLogger("engine.generation.grammar")


@dataclass(frozen=True)
class Compiled:
    """A fresh matcher to copy, or why the format is invalid."""

    matcher: LLMatcher | None
    error: str = ""


def grammar_tokenizer(tokenizer, vocab_size: int, eos_ids: frozenset[int]) -> LLTokenizer | None:
    """Masks ``vocab_size`` wide, EOS ids as stop tokens; None without a fast tokenizer."""
    try:
        backend = copy.copy(getattr(tokenizer, "backend_tokenizer", tokenizer))
        backend.no_padding()
        backend.no_truncation()
        return LLTokenizer(backend.to_str(), n_vocab=vocab_size, eos_token=sorted(eos_ids) or None)
    except Exception as exc:  # noqa: BLE001 - a model without structured output still serves
        log.warning("structured output is off for this model: %s", exc)
        return None


class Grammars:
    """``build``: makes the tokenizer on first use instead (on the compile pool; building one
    holds the interpreter for a few hundred milliseconds, which a model that never sees a
    format should not cost the other models' streams)."""

    def __init__(self, tokenizer: LLTokenizer | None, limits: GrammarLimits = GrammarLimits(), *,
                 build: Callable[[], LLTokenizer | None] | None = None):
        self._tokenizer = tokenizer
        self._build = build
        self._building = threading.Lock()
        self.limits = limits
        self.stats = GrammarStats()
        self._cache: ObjectCache[Compiled] = ObjectCache(limits.cache_entries)
        self._pool = ThreadPoolExecutor(limits.compile_threads, thread_name_prefix="grammar")
        self._pending = 0  # event loop only

    @property
    def available(self) -> bool:
        """Whether formats can be served (a tokenizer still to build counts as one)."""
        return self._build is not None or self._tokenizer is not None

    @property
    def tokenizer(self) -> LLTokenizer | None:
        """The tokenizer, built now if it is not yet: blocking, never on the loop or an engine thread."""
        if self._build is not None:
            with self._building:
                if self._build is not None:
                    self._tokenizer, self._build = self._build(), None
        return self._tokenizer

    @property
    def formats(self) -> tuple[FormatKind, ...]:
        return tuple(FormatKind) if self.available else ()

    async def constrain(self, fmt: ResponseFormat) -> Constraint:
        """A new row constraint; InvalidRequest naming the field when the format is
        invalid, over its limits or too slow to compile; CompilerBusy when the pool is."""
        if not self.available:
            raise self.unsupported()
        limits = self.limits
        if self._pending >= limits.compile_threads + limits.compile_queue:
            raise self._busy(f"{self._pending - limits.compile_threads} formats already wait to compile")
        started: list[float] = []  # set by the pool thread when the compile begins
        future = asyncio.get_running_loop().run_in_executor(self._pool, self._timed, fmt, started)
        self._pending += 1
        future.add_done_callback(self._done)
        try:  # shielded: a compile that runs late still lands in the cache
            compiled = await asyncio.wait_for(asyncio.shield(future), limits.compile_timeout_s)
        except asyncio.TimeoutError:
            compiled = await self._late(future, started)
        except InvalidRequest:
            self.stats.rejected += 1
            raise
        tokenizer = self._tokenizer  # built by the first compile
        if tokenizer is None:
            raise self.unsupported()
        if compiled.error:
            self.stats.rejected += 1
            raise InvalidRequest(field_name(fmt), compiled.error)
        assert compiled.matcher is not None  # None only with an error
        self.stats.requests[fmt.kind.value] += 1
        return Constraint(compiled.matcher.deep_copy(), frozenset(tokenizer.eos_tokens), self.stats, tokenizer)

    def unsupported(self) -> Unsupported:
        return Unsupported("this model's tokenizer cannot drive a grammar; response_format is not supported")

    async def _late(self, future: asyncio.Future, started: list[float]) -> Compiled:
        """CompilerBusy if not begun, else what is left of its own timeout from its start."""
        too_long = Compiled(None, f"compiling took longer than {self.limits.compile_timeout_s:g} s")
        if not started:
            future.cancel()
            raise self._busy(f"no compile thread was free for {self.limits.compile_timeout_s:g} s")
        remaining = started[0] + self.limits.compile_timeout_s - time.perf_counter()
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(remaining, 0.0))
        except asyncio.TimeoutError:
            return too_long

    def _busy(self, why: str) -> CompilerBusy:
        return CompilerBusy(f"the response_format compilers are busy ({why}); retry later", retry_after_s=1.0)

    def _done(self, _future) -> None:
        self._pending -= 1

    def _timed(self, fmt: ResponseFormat, started: list[float]) -> Compiled:
        started.append(time.perf_counter())
        return self._compiled(fmt)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compiled(self, fmt: ResponseFormat) -> Compiled:
        """Pool thread."""
        text = grammar_text(fmt, self.limits)
        key = f"{fmt.kind.value}\0{text}"
        lease = self._cache.take(key)
        if lease is not None:
            with lease as compiled:
                return compiled
        compiled = self._compile(text)
        self._cache.put(key, compiled)
        return compiled

    def _compile(self, text: str) -> Compiled:
        tokenizer = self.tokenizer  # the first compile builds it
        if tokenizer is None:  # it could not be built: constrain says unsupported
            return Compiled(None, "unsupported")
        matcher = LLMatcher(tokenizer, text, log_level=0, limits=self.limits.parser_limits())
        if not matcher.is_error():
            matcher.compute_bitmask()  # builds the lexer's first states here, not on the engine thread
        if matcher.is_error():
            return Compiled(None, matcher_error(matcher) or "the grammar is invalid")
        return Compiled(matcher)
