"""The generation engine's asyncio facade: validate, tokenize, admit, stream.

``GenerationEngine.generate`` is an async iterator of events. It never touches MLX:
rows go to the engine thread (``Worker``) and events come back through an
``asyncio.Queue`` fed with ``call_soon_threadsafe``. Admission (FIFO, bounded queue)
happens here, so the engine thread never holds more rows than its capacity; a
row's lease is released by the engine thread when the row leaves the batch.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable

from .admission import AdmissionClosed, AdmissionPool, AdmissionRejected
from .admitter import Admitter
from ..description import Capabilities, GraphDescriptor, ModelDescription, ModelKind
from .detokenizer import IncrementalDetokenizer
from ..hardware.device import backend_name, blas_name
from ..errors import (DuplicateRequestId, EngineFailure, InvalidRequest, NotReady, QueueFull,
                     Unsupported)
from ..events import Event, FinishReason, Finished, Timings, Usage
from ..loading.model import LoadedModel, default_name, load_generation_model
from ..hardware.machine import usable_memory
from ..memory.budget import MemoryGate
from ..memory.calibration import calibrate_decode
from ..memory.facts import facts_from_model
from ..memory.plan import MemoryPlan, plan_memory
from .prefill import FixedPrefillPolicy
from ..requests import ChatPrompt, GenerationRequest, TextPrompt, TokenPrompt
from .row import Row, StopRule
from .sampling import RowSampler
from .scheduler import Scheduler, SchedulerConfig
from .stops import StopStrings
from ..validation import Limits, check_token_ids, validate_request
from .worker import Worker

log = logging.getLogger("engine.generation.engine")


@dataclass
class _Handle:
    """A request known to the facade, for Cancel."""

    cancel_requested: bool = False
    acquiring: asyncio.Future | None = None
    submitted: bool = False


@dataclass(frozen=True)
class EngineStats:
    """A consistent snapshot: admission counts, rows and KV bytes on the engine thread."""

    queued: int
    admitted: int
    reserved: int  # memory reservations held
    rows: int
    kv_bytes: int
    tracked: int  # requests the facade knows (queued, running or finishing)


@dataclass(frozen=True)
class GenerationConfig:
    dtype: str = "auto"
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    limits: Limits = field(default_factory=Limits)
    memory_limit_bytes: int | None = None  # None: what this machine has available
    memory_reserve_bytes: int | None = None  # None: max(256 MiB, 5% of usable)


class GenerationEngine:
    def __init__(self, source: str, *, name: str = "", config: GenerationConfig = GenerationConfig()):
        self.source = source
        self.name = name or default_name(source)
        self.config = config
        self._loaded: LoadedModel | None = None
        self._pool = AdmissionPool(config.scheduler.max_active, config.scheduler.max_queued)
        self._admitter = Admitter(self._pool)
        self._requests: dict[str, _Handle] = {}
        self._facts = None  # memory facts of the loaded weights (engine thread, at load)
        self._machine_total = usable_memory()[1]
        self._worker: Worker[LoadedModel] = Worker(self.name, self._load, self._scheduler)

    # lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        """Loads the model on the engine thread; returns when it is ready."""
        self._loaded = await asyncio.wrap_future(self._worker.start())
        self.name = self._loaded.name

    @property
    def ready(self) -> bool:
        return self._loaded is not None and not self._pool.closed

    @property
    def loaded(self) -> LoadedModel:
        if self._loaded is None:
            raise NotReady(f"model {self.name or self.source!r} is still loading")
        return self._loaded

    async def close(self) -> None:
        """Rejects waiters, ends running rows (CANCELLED) and stops the thread."""
        self._pool.close()
        await asyncio.to_thread(self._worker.stop)

    def _load(self) -> LoadedModel:
        """Runs on the engine thread: the weights, then the memory facts of them."""
        loaded = load_generation_model(self.source, name=self.name, dtype=self.config.dtype)
        self._facts = facts_from_model(loaded.model, loaded.config)
        self._decode = calibrate_decode(loaded.model, self._facts)
        self._admitter.gate = MemoryGate(self._facts, usable=self.config.memory_limit_bytes,
                                         reserve_bytes=self.config.memory_reserve_bytes,
                                         prefill_chunk=self.config.scheduler.prefill_chunk)
        return loaded

    def _scheduler(self, loaded: LoadedModel) -> Scheduler:
        tokenizer = loaded.tokenizer
        return Scheduler(loaded.model, self.config.scheduler,
                         FixedPrefillPolicy(self.config.scheduler.prefill_chunk),
                         lambda i: tokenizer.decode([i]), namespace=loaded.name)

    # facts ----------------------------------------------------------------------
    def describe(self) -> ModelDescription:
        m = self.loaded
        return ModelDescription(
            name=m.name, kind=ModelKind.GENERATION,
            descriptor=GraphDescriptor(f"mlx-lm/{m.model_type}", backend_name(), "mlx-lm/forward-v1",
                                       "mlx-lm/kv-cache-v1", str(m.artifact)),
            capabilities=Capabilities(prefill_bounded_workspace=True),
            context_length=m.context_length, vocab_size=m.vocab_size,
            eos_token_ids=tuple(sorted(m.eos_ids)), has_chat_template=m.has_chat_template,
            dtype=m.dtype, blas=blas_name(), embedding_dimensions=0, source=m.source)

    async def plan_memory(self, context_tokens: int, max_generation_tokens: int = 0) -> MemoryPlan:
        """The memory plan for ``context_tokens`` (0: the model's context length),
        computed on the engine thread from the loaded arrays and this machine."""
        m = self.loaded
        context = context_tokens or m.context_length
        if max_generation_tokens > context:
            raise InvalidRequest("max_generation_tokens", "must not exceed context_tokens")

        gate = self._admitter.gate

        def plan(_scheduler) -> MemoryPlan:
            return plan_memory(self._facts, context_tokens=context,
                               max_generation_tokens=max_generation_tokens,
                               prefill_chunk=self.config.scheduler.prefill_chunk,
                               usable=gate.usable_bytes, reserve_bytes=gate.reserve_bytes,
                               machine_total=self._machine_total,
                               decode=self._decode, context_limit=m.context_length)

        return await asyncio.wrap_future(self._worker.call(plan))

    async def stats(self) -> EngineStats:
        rows, kv_bytes = await asyncio.wrap_future(self._worker.call(lambda s: (s.active, s.kv_bytes)))
        return EngineStats(self._pool.queued, self._pool.active, self._admitter.reserved, rows, kv_bytes,
                           len(self._requests))

    @property
    def active(self) -> int:
        return self._pool.active

    @property
    def queued(self) -> int:
        return self._pool.queued

    # tokens ---------------------------------------------------------------------
    def tokenize(self, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        tok = self.loaded.tokenizer
        ids = tok.encode(text, add_special_tokens=add_special_tokens)
        return ids, tok.convert_ids_to_tokens(ids)

    def detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        check_token_ids("token_ids", ids, self.loaded.vocab_size)
        return self.loaded.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def encode_prompt(self, request: GenerationRequest) -> tuple[list[int], int | None]:
        """The prompt's token ids (chat prompts rendered with the template) and, for
        chats, the length of the rendered history: a boundary worth caching."""
        snapshot_at = None
        m, prompt = self.loaded, request.prompt
        tok = m.tokenizer
        if isinstance(prompt, TokenPrompt):
            ids = list(prompt.ids)
            check_token_ids("tokens.ids", ids, m.vocab_size)
            field_name = "tokens.ids"
        elif isinstance(prompt, TextPrompt):
            bos = tok.bos_token
            ids = tok.encode(prompt.text, add_special_tokens=bos is None or not prompt.text.startswith(bos))
            field_name = "text"
        elif isinstance(prompt, ChatPrompt):
            ids, snapshot_at = self._render_chat(prompt)
            field_name = "chat.messages"
        else:
            raise InvalidRequest("prompt", "one of text, tokens or chat must be set")
        if not ids:
            raise InvalidRequest(field_name, "the prompt is empty")
        limit = min(self.config.limits.max_prompt_tokens or m.context_length, m.context_length - 1)
        if len(ids) > limit:
            raise InvalidRequest(field_name, f"the prompt has {len(ids)} tokens; the limit is {limit}")
        return ids, snapshot_at

    def _render_chat(self, prompt: ChatPrompt) -> tuple[list[int], int | None]:
        m = self.loaded
        if not m.has_chat_template:
            raise Unsupported(f"model {m.name!r} has no chat template; send text or tokens")
        if not prompt.messages:
            raise InvalidRequest("chat.messages", "at least one message is required")
        messages = [{"role": x.role, "content": x.content} for x in prompt.messages]
        ids = self._apply_template(messages, True)
        history = self._apply_template(messages[:-1], False) if len(messages) > 1 else []
        shared = 0 < len(history) < len(ids) and ids[: len(history)] == history
        return ids, len(history) if shared else None

    def _apply_template(self, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
        tok = self.loaded.tokenizer
        try:
            text = tok.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
        except Exception as exc:  # template errors are the caller's input errors
            raise InvalidRequest("chat.messages", f"the chat template rejected the messages: {exc}") from exc
        return tok.encode(text, add_special_tokens=False)

    # requests -------------------------------------------------------------------
    def cancel(self, request_id: str) -> bool:
        """Cancels a queued or running request; False if no such request runs."""
        handle = self._requests.get(request_id)
        if handle is None or handle.cancel_requested:
            return False
        handle.cancel_requested = True
        if handle.submitted:
            self._worker.cancel(request_id)
        elif handle.acquiring is not None:
            handle.acquiring.cancel()
        return True

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        """Streams Started, Deltas and a Finished event for one request."""
        m = self.loaded
        if self._pool.closed:
            raise NotReady("the server is shutting down", retry_after_s=1.0)
        validate_request(request, m.vocab_size, self.config.limits)
        request_id = request.request_id or uuid.uuid4().hex
        if request_id in self._requests:
            raise DuplicateRequestId(f"request id {request_id!r} is already running",
                                     metadata={"request_id": request_id})
        handle = self._requests[request_id] = _Handle()
        try:
            async for event in self._run(request, request_id, handle):
                yield event
        finally:
            self._requests.pop(request_id, None)

    async def _run(self, request: GenerationRequest, request_id: str, handle: _Handle):
        loop = asyncio.get_running_loop()
        arrived = loop.time()
        prompt, snapshot_at = await asyncio.to_thread(self.encode_prompt, request)
        max_tokens = self._max_tokens(request, len(prompt))
        self._admitter.check(len(prompt) + max_tokens)
        if handle.cancel_requested:
            yield _cancelled_before_start(len(prompt), loop.time() - arrived)
            return
        handle.acquiring = asyncio.ensure_future(self._admitter.admit(len(prompt) + max_tokens))
        try:
            ticket = await handle.acquiring
        except AdmissionRejected:
            raise QueueFull(f"the queue of model {self.name!r} is full "
                            f"({self._pool.max_queued} waiting); retry later", retry_after_s=1.0) from None
        except AdmissionClosed:
            raise NotReady("the server is shutting down") from None
        except asyncio.CancelledError:
            _release_if_granted(handle.acquiring)  # granted just before we were cancelled
            if not handle.cancel_requested:
                raise
            yield _cancelled_before_start(len(prompt), loop.time() - arrived)
            return
        if handle.cancel_requested:  # Cancel arrived after the grant, before submission
            ticket.release()
            yield _cancelled_before_start(len(prompt), loop.time() - arrived)
            return
        events: asyncio.Queue[Event] = asyncio.Queue()
        row = self._make_row(request, request_id, prompt, max_tokens,
                             _threadsafe(loop, events.put_nowait), _threadsafe(loop, ticket.release))
        row.snapshot_at = snapshot_at
        row.arrived -= loop.time() - arrived  # count tokenization and queueing
        handle.submitted = True
        self._worker.submit(row)
        finished = False
        try:
            while True:
                event = await events.get()
                if isinstance(event, Finished):
                    finished = True
                    if event.reason is FinishReason.ERROR:
                        log.error("request %s failed: %s", request_id, event.error)
                        raise EngineFailure(event.error or "generation failed")
                    yield event
                    return
                yield event
        finally:
            if not finished:
                self._worker.cancel(request_id)

    def _max_tokens(self, request: GenerationRequest, prompt_tokens: int) -> int:
        room = self.loaded.context_length - prompt_tokens
        asked = request.stopping.max_tokens
        fits = self._admitter.max_context
        if asked is None and fits is not None:  # unset: as much as memory allows, at least 1
            room = min(room, max(fits - prompt_tokens, 1))
        if asked is not None and asked > room:
            raise InvalidRequest("stopping.max_tokens",
                                 f"{asked} tokens after a {prompt_tokens}-token prompt exceed the "
                                 f"context length {self.loaded.context_length}")
        return asked if asked is not None else min(room, self.config.limits.max_tokens)

    def _make_row(self, request: GenerationRequest, request_id: str, prompt: list[int],
                  max_tokens: int, sink: Callable, release: Callable) -> Row:
        m = self.loaded
        s = request.stopping
        rule = StopRule(max_tokens, s.min_tokens, m.eos_ids, frozenset(s.stop_token_ids), s.ignore_eos)
        decode = lambda ids: m.tokenizer.decode(ids)  # noqa: E731
        return Row(request_id=request_id, model=m.name, prompt=prompt, rule=rule,
                   sampler=RowSampler(request.sampling, prompt),
                   detokenizer=IncrementalDetokenizer(decode, prompt), stops=StopStrings(s.stop),
                   sink=sink, release=release, top_logprobs=request.top_logprobs,
                   logprobs=request.logprobs or request.top_logprobs > 0,
                   use_prefix_cache=not request.bypass_prefix_cache, session_id=request.session_id)


def _threadsafe(loop: asyncio.AbstractEventLoop, fn: Callable) -> Callable:
    """Wraps ``fn`` so the engine thread can call it; dropped once the loop is closed."""
    def call(*args) -> None:
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass
    return call


def _release_if_granted(acquiring: asyncio.Future) -> None:
    if acquiring.done() and not acquiring.cancelled() and acquiring.exception() is None:
        acquiring.result().release()


def _cancelled_before_start(prompt_tokens: int, elapsed: float) -> Finished:
    return Finished(FinishReason.CANCELLED, Usage(prompt_tokens, 0, 0), Timings(elapsed, 0.0, 0.0, elapsed))
