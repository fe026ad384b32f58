"""The generation engine's asyncio facade: validate, refuse at once, tokenize, submit a
``CoreRequest`` (plain data), relay its events. It never touches MLX; the sequences built
from a submitted request belong to the engine thread."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from concurrent.futures import Future
from typing import AsyncIterator, TypeVar

from ...adapters.bank import AdapterBank
from ...adapters.control import Adapters
from ...adapters.source import AdapterLimits
from ...caches.blocks import BlockLedger
from ...caches.disk import DiskTier
from ...caches.tier import Prefetched
from ...description import ModelDescription, NativeDraft
from ...errors import EngineDead, EngineFailure, InvalidRequest, NotReady
from ...events import Event, Finished, FinishReason, Timings, Usage
from ...hardware.machine import usable_memory
from ...liveness import Breaker
from ...loading.model import LoadedModel, default_name
from ...loading.tokenizer_files import tokenizer_files
from ...memory.plan import MemoryPlan
from ...memory.planner import PlanMemory, Planner
from ...preparation import Preparation
from ...requests import FormatKind, GenerationRequest, ResponseFormat
from ...serving.admission import Tenants
from ...serving.protocol import Control
from ...serving.thread import EngineThread
from ...tenancy import Tenant
from ...validation import check_prompt_logprobs, check_token_ids, validate_request
from ..config import GenerationConfig
from ..core.request import CoreRequest
from ..core.sampling.words import SamplingTokens, sampling_tokens
from ..core.scheduling.scheduler import Scheduler
from ..core.speculation.draft import DraftModel
from ..core.speculation.head_drafter import HeadDrafter
from ..core.speculation.heads import MTP
from ..core.speculation.taps import tappable
from ..grammar.formats import check_format, field_name
from ..loaded import Loaded, load_engine
from .chat.chat_plan import chat_tools, plan_chat
from .chat.choice import enforceable
from .chat.tools import ToolSet
from .model_info import describe_generation, speculation_facts
from .prefix_control import PrefixControl
from .prepare import check_media, check_speculation, prediction_ids
from .prompts import EncodedPrompt
from .refusals import check_ever_fits, check_queue_room, max_tokens_for
from .reports import LoadReports
from .streams import Stream, Streams

log = logging.getLogger("engine.generation.frontend.engine")
T = TypeVar("T")


class GenerationEngine(LoadReports):
    def __init__(self, source: str, *, name: str = "", config: GenerationConfig = GenerationConfig()):
        self.source = source
        self.name = name or default_name(source)
        self.config = config
        self._served: Loaded | None = None  # the engine thread's load, once it has published it
        self._tenants = Tenants(self.name)
        self.preparation = Preparation.of(config.limits)  # a ModelSet shares one among its engines
        self._streams = Streams(self._tenants)
        self._closing = False
        self._machine_total = usable_memory()[1]
        self.blocks = BlockLedger()  # the prefix cache's blocks, for routers
        self._thread: EngineThread[Loaded, CoreRequest, Scheduler] = EngineThread(
            self.name, self._load, self._scheduler)
        self.adapters = Adapters(self._thread.ask, self.name, config.max_adapters,
                                 root=config.adapter_root,
                                 limits=AdapterLimits(config.max_adapter_rank, config.max_adapter_bytes),
                                 room=lambda: self._served.budget.fixed_room if self._served is not None else None)
        self.prefix = PrefixControl(self._thread.ask, self.adapters, config.scheduler, config.limits)
        self.breaker = Breaker(lambda: self.name, self._thread.fault, self._fail_all)

    def control(self, control: Control[Scheduler, T]) -> Future[T]:
        """``control.answer(scheduler)`` on the engine thread between ticks; a future of the
        answer (the way every operation but a request reaches the thread)."""
        return self._thread.ask(control)

    def _fail_all(self, error: EngineDead) -> None:
        """The breaker's ending: every submitted stream fails, then the thread gives up."""
        self._streams.fail_submitted(error.message)
        self._thread.give_up(error)

    async def start(self) -> None:
        served = await asyncio.wrap_future(self._thread.start())
        self._served, self.name = served, served.model.name
        self._tenants.model = served.model.name
        await self.adapters.load_all(self.config.adapters)

    @property
    def ready(self) -> bool:
        return self._served is not None and not self._closing and not self.breaker.broken

    @property
    def weights_bytes(self) -> int:
        """Bytes of the weights in memory (a draft's or head's included); 0 before the load."""
        return self._served.facts.weights_bytes if self._served is not None else 0

    @property
    def served(self) -> Loaded:
        """What the model's load gave (NotReady while loading)."""
        if self._served is None:
            raise NotReady(f"model {self.name or self.source!r} is still loading")
        return self._served

    @property
    def loaded(self) -> LoadedModel:
        return self.served.model

    async def close(self) -> None:
        """Ends open requests (CANCELLED) and stops the thread."""
        self._closing = True
        self.adapters.close()
        await asyncio.to_thread(self._thread.stop)
        await self.prefix.close()  # the shutdown queued what memory held: let it land
        if self._served is not None:
            self._served.grammars.close()

    def _load(self) -> Loaded:
        """Engine thread."""
        return load_engine(self.source, self.name, self.config)

    def _scheduler(self, served: Loaded) -> Scheduler:
        """Engine thread."""
        loaded, tokenizer = served.model, served.model.tokenizer
        drafter = (DraftModel(served.draft.model, self.config.scheduler.prefill_chunk) if served.draft is not None
                   else HeadDrafter(loaded.model, served.head, self.config.scheduler.prefill_chunk)
                   if served.head is not None else None)
        return Scheduler(loaded.model, self.config.scheduler, lambda i: tokenizer.decode([i]),
                         budget=served.budget, namespace=loaded.name, interrupt=self._thread.stop_requested,
                         rolls_back=loaded.traits.can_roll_back, drafter=drafter,
                         adapters=AdapterBank(loaded.model, loaded.name),
                         planner=Planner(served.decode, self._machine_total, loaded.context_length),
                         ledger=self.blocks, disk=self.prefix.open_disk(loaded), vision=loaded.vision)

    def describe(self) -> ModelDescription:
        served = self.served  # NotReady while loading
        m, formats, syntax, head = served.model, served.grammars.formats, served.syntax, served.head
        speculation = speculation_facts(served.rolls_back, served.draft_name,
                                        self.config.speculation.mode,
                                        bool(formats) and self.config.speculation.grammar_proposals)
        chat = syntax.facts(enforced=bool(formats) and syntax.tool_calling and enforceable(syntax))
        native = (NativeDraft(MTP, self.config.speculation.max_draft_tokens)
                  if head is not None and head.kind == MTP else None)
        return describe_generation(m, speculation, tuple(k.value for k in formats), chat,
                                   tuple(self.adapters.infos()), self.adapters.limit, self.config.scheduler.kv_bits,
                                   taps=served.rolls_back and tappable(m.model), native_draft=native)

    async def plan_memory(self, context_tokens: int, max_generation_tokens: int = 0) -> MemoryPlan:
        """The memory plan for ``context_tokens`` (0: the model's context length)."""
        context = context_tokens or self.loaded.context_length
        if max_generation_tokens > context:
            raise InvalidRequest("max_generation_tokens", "must not exceed context_tokens")
        return await asyncio.wrap_future(self.control(PlanMemory(context, max_generation_tokens)))

    @property
    def disk(self) -> DiskTier | None:
        """The prefix cache's disk tier (None without ``--prefix-cache-dir``, or before load)."""
        return self.prefix.disk

    async def flush_prefix_cache(self) -> int:
        return await self.prefix.flush()

    async def prefetch(self, request: GenerationRequest) -> Prefetched:
        """Brings the longest stored prefix of ``request``'s prompt into memory (``PrefixControl``)."""
        m = self._checked(request)
        return await self.prepared(request.tenant, self.prefix.prefetch, m, request,
                                   lambda r: self.preparation.run(r.tenant, self._prepare, r))

    async def prepared(self, tenant: Tenant, work, *args):
        """``await work(*args)``, counted in ``tenant``'s requests in flight meanwhile (its
        max_in_flight, max_queued and tokens_per_minute refuse it as they refuse a Generate)."""
        self._tenants.admit(tenant)
        try:
            return await work(*args)
        finally:
            self._tenants.closed(tenant.name, False, False)

    async def tokenize_for(self, tenant: Tenant, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        """``tokenize`` in the preparation pool, counted for ``tenant``."""
        return await self.prepared(tenant, self.preparation.run, tenant, self.tokenize, text, add_special_tokens)

    async def detokenize_for(self, tenant: Tenant, ids: list[int], skip_special_tokens: bool) -> str:
        """``detokenize`` in the preparation pool, counted for ``tenant``."""
        return await self.prepared(tenant, self.preparation.run, tenant, self.detokenize, ids, skip_special_tokens)

    async def close_session(self, session_id: str, tenant: str) -> int:
        self.loaded
        return await self.prefix.close_session(session_id, tenant)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token of context holds, over every layer (0 before the model loads)."""
        return sum(self._served.facts.kv_bytes_per_token_per_layer) if self._served is not None else 0

    def tokenize(self, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        tok = self.loaded.tokenizer
        ids = tok.encode(text, add_special_tokens=add_special_tokens)
        return ids, tok.convert_ids_to_tokens(ids)

    def detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        check_token_ids("token_ids", ids, self.loaded.vocab_size)
        return self.loaded.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def tokenizer_files(self) -> dict[str, bytes]:
        """What a router needs to tokenize as this model does, by file name; blocking."""
        return tokenizer_files(self.loaded)

    @property
    def max_prompt_tokens(self) -> int:
        return self.served.prompts.max_prompt_tokens

    def encode_prompt(self, request: GenerationRequest, tools: ToolSet | None = None) -> EncodedPrompt:
        """The prompt's token ids (chats rendered with the template and ``tools``); blocking."""
        return self.served.prompts.encode(request, tools)

    def cancel(self, request_id: str, tenant: str = "") -> bool:
        """False if ``tenant`` (a Tenant.name) runs no request of this id."""
        stream = self._streams.get(request_id, tenant)
        if stream is None or stream.cancel_requested:
            return False
        stream.cancel_requested = True
        if stream.submitted:
            self._thread.cancel(stream.key)
        return True

    def _checked(self, request: GenerationRequest) -> LoadedModel:
        """What Generate and Prefetch refuse alike before any work: a closing or broken model,
        an invalid request, media the model does not take. The loaded model."""
        m = self.loaded
        if self._closing:
            raise NotReady("the server is shutting down", retry_after_s=1.0)
        self.breaker.refuse()
        validate_request(request, m.vocab_size, self.config.limits, m.context_length)
        check_media(request, m)
        return m

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        served = self.served
        m = self._checked(request)
        check_speculation(request, self.config.speculation, m, bool(served.draft_name), served.rolls_back,
                          self.config.limits)
        check_queue_room(self._streams.sequences, self.config.scheduler, self.name, request.n)
        stream = self._streams.open(request.request_id or uuid.uuid4().hex, request.tenant, request.n)
        try:
            async for event in self._run(request, stream):
                yield event
        finally:
            if not stream.submitted:
                self._streams.abandon(stream)
            elif not stream.finished:
                self._thread.cancel(stream.key)  # the consumer left early

    async def _run(self, request: GenerationRequest, stream: Stream) -> AsyncIterator[Event]:
        arrived, served = time.perf_counter(), self.served
        m, budget, syntax = served.model, served.budget, served.syntax
        adapter = self.adapters.acquire(request.adapter, stream.closers)
        prompt, tools, words = await self.preparation.run(request.tenant, self._prepare_generate, request)
        predicted = (await self.preparation.run(request.tenant, prediction_ids, request, m.tokenizer,
                                                self.config.limits) if request.prediction else ())
        check_prompt_logprobs(request, len(prompt.ids), self.config.limits)
        max_tokens = max_tokens_for(request, len(prompt.ids), m.context_length, budget,
                                    self.config.limits.max_tokens)
        check_ever_fits(budget, len(prompt.ids) + max_tokens, request.n)
        asked = request
        request, chat = plan_chat(asked, tools, syntax, prompt.opens_reasoning, m.name)
        chats = [chat, *(plan_chat(asked, tools, syntax, prompt.opens_reasoning, m.name)[1]
                         for _ in range(1, request.n))]  # each choice splits its own output
        constraints = [await self._constraint(request, chat.grammar) for _ in range(request.n)]
        if stream.cancel_requested:
            elapsed = time.perf_counter() - arrived
            for choice in range(request.n):
                yield Finished(FinishReason.CANCELLED, Usage(len(prompt.ids), 0, 0),
                               Timings(elapsed, 0.0, 0.0, elapsed), choice=choice)
            return
        core = CoreRequest(stream.key, stream.request_id, request, prompt, max_tokens, arrived, m, stream.sink,
                           self.config.speculation, words, tuple(constraints), adapter, predicted)
        self.breaker.refuse()  # nothing is submitted to a dead thread
        self._streams.submitted(stream, len(prompt.ids))
        self._thread.submit(core)
        ended: set[int] = set()
        while True:
            event = await stream.events.get()
            if isinstance(event, Finished) and event.reason is FinishReason.ERROR:
                constraint = constraints[event.choice]
                if constraint is not None and constraint.error:  # the format, not the engine, failed
                    fmt = request.response_format
                    raise InvalidRequest(field_name(fmt) if fmt is not None else "chat.tools",
                                         f"exceeded its limits while generating: {constraint.error}")
                self.breaker.refuse()  # the thread died or was given up: ENGINE_DEAD
                log.error("request %s failed: %s", stream.request_id, event.error)
                raise EngineFailure(event.error or "generation failed")
            for out in chats[getattr(event, "choice", 0)].relay(event):
                yield out
            if isinstance(event, Finished):
                ended.add(event.choice)
                if len(ended) == request.n:  # the last choice ended
                    return

    async def _constraint(self, request: GenerationRequest, tool_grammar: str | None):
        """The response format's matcher, or the one forcing a tool call."""
        if request.response_format is not None:
            return await self.served.grammars.constrain(request.response_format)
        if tool_grammar is None:
            return None
        try:
            return await self.served.grammars.constrain(ResponseFormat(FormatKind.GRAMMAR, tool_grammar))
        except InvalidRequest as exc:  # the tools' schemas, not a grammar the caller wrote
            raise InvalidRequest("chat.tools", exc.description) from exc

    def _prepare_generate(self, request: GenerationRequest) -> tuple[EncodedPrompt, ToolSet | None, SamplingTokens]:
        """``_prepare``, and the texts the sampler reads (bad words, DRY's breakers) tokenized."""
        prompt, tools = self._prepare(request)
        tokenizer = self.loaded.tokenizer
        return prompt, tools, sampling_tokens(request.sampling,
                                              lambda text: tokenizer.encode(text, add_special_tokens=False))

    def _prepare(self, request: GenerationRequest) -> tuple[EncodedPrompt, ToolSet | None]:
        """The format's limits and the tools first (cheap), then the prompt's ids; blocking."""
        if request.response_format is not None:
            grammars = self.served.grammars
            if not grammars.available:
                raise grammars.unsupported()
            check_format(request.response_format, grammars.limits)
        tools = chat_tools(request, self.served.syntax, self.loaded.name)
        return self.encode_prompt(request, tools), tools
