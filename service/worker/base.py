"""What SMG's worker contracts share: one model, health, abort, model and server facts, the tokenizer.

Invariants: every contract goes through the same engines, limits and ``@mapped`` errors as
InferenceService; requests run as the caller's tenant, and Abort reaches only its ids; load
figures cover every tenant only for the router and admin roles (others see their own requests),
and the model's path goes to admins only (others get its served name there).
"""

from __future__ import annotations

import asyncio
import time
from types import ModuleType

import grpc

from engine.errors import EngineError, Unsupported
from engine.generation.frontend.engine import GenerationEngine
from engine.models import Engine, ModelSet
from engine.validation import Limits, at_most

from ..calls import current_call
from ..identity import current_identity
from ..interceptors import ServerState
from ..status import MAX_MESSAGE_BYTES, ResponseTooLarge, mapped
from . import convert
from .tokenizer_bundle import TokenizerBundle

MAX_ABORT_IDS = 1024  # request ids one Abort may name (more: INVALID_ARGUMENT naming request_ids)


class ContractServicer:
    """The RPCs every worker contract has, over the contract's message module ``pb``."""

    pb: ModuleType

    def __init__(self, models: ModelSet, state: ServerState, limits: Limits = Limits(),
                 max_message_bytes: int = MAX_MESSAGE_BYTES, model: str = ""):
        self.models = models
        # the one model served ("": the first generation model, else the first embedding one), and
        # with "MODEL:ADAPTER" one of its loaded adapters, applied to every request
        self.model, _, self.adapter = model.partition(":")
        self.state = state
        self.limits = limits  # for the request id, checked before the model is looked up
        self.max_message_bytes = max_message_bytes
        self.started = time.monotonic()
        self._files: dict[str, bytes] | None = None
        self._bundle: TokenizerBundle | None = None

    def _engine(self) -> GenerationEngine:
        """The served model, which must generate (and hold the served adapter, if any)."""
        engine = self._named(self.models.generator(self._name()))
        if self.adapter and self.adapter not in {a.name for a in engine.adapters.infos()}:
            raise Unsupported(f"adapter {self.adapter!r} of model {engine.name!r}, which the worker contracts "
                              f"serve, is not loaded")
        return engine

    def _model(self) -> Engine:
        """The served model, of either kind."""
        name = self._name()
        return self._named(self.models.any(name) if name else self.models.embedder(""))

    def _name(self) -> str:
        return self.model or (self.models.generation[0].name if self.models.generation else "")

    @staticmethod
    def _named(engine):
        call = current_call()
        if call is not None:
            call.model = engine.name
        return engine

    def _sendable(self, message, stream: bool):
        """``message`` unless an unstreamed reply outgrows the message limit."""
        if not stream and (size := message.ByteSize()) > self.max_message_bytes:
            raise ResponseTooLarge(size, self.max_message_bytes)
        return message

    @mapped()
    async def HealthCheck(self, request, context: grpc.aio.ServicerContext):
        if self.state.draining:
            return self.pb.HealthCheckResponse(healthy=False, message="draining")
        try:
            self._engine() if self.adapter else self._model()
        except EngineError as exc:
            return self.pb.HealthCheckResponse(healthy=False, message=exc.message)
        return self.pb.HealthCheckResponse(healthy=True, message="OK")

    @mapped()
    async def Abort(self, request, context: grpc.aio.ServicerContext):
        at_most("request_ids", len(request.request_ids), MAX_ABORT_IDS, "request ids")
        tenant = current_identity().tenant.name
        for request_id in request.request_ids:
            if request_id:
                self._cancel(request_id, tenant)
        return self.pb.AbortResponse()

    def _cancel(self, request_id: str, tenant: str) -> None:
        self.models.cancel(request_id, tenant)

    @mapped()
    async def GetModelInfo(self, request, context: grpc.aio.ServicerContext):
        engine = self._model()
        files = await self._tokenizer_files(engine)
        info = convert.model_info(self.pb.GetModelInfoResponse, engine.describe(), files, engine.max_prompt_tokens,
                                  path=current_identity().admin)
        if self.adapter:
            info.served_model_name = f"{info.served_model_name}:{self.adapter}"
        return info

    @mapped()
    async def GetServerInfo(self, request, context: grpc.aio.ServicerContext):
        caller = current_identity()
        active = (sum(e.active + e.queued for e in self.models.generation) if caller.router
                  else sum(sum(own_load(e, caller.tenant.name)) for e in self.models.generation))
        return self.pb.GetServerInfoResponse(server_type=convert.SERVER_TYPE, active_requests=active,
                                             uptime_seconds=time.monotonic() - self.started)

    @mapped()
    async def GetTokenizer(self, request, context: grpc.aio.ServicerContext):
        bundle = await self._tokenizer_bundle(self._model())
        for chunk in bundle.chunks():
            yield chunk

    async def _tokenizer_files(self, engine: Engine) -> dict[str, bytes]:
        if self._files is None:
            self._files = await asyncio.to_thread(engine.tokenizer_files)
        return self._files

    async def _tokenizer_bundle(self, engine: Engine) -> TokenizerBundle:
        if self._bundle is None:
            files = await self._tokenizer_files(engine)
            self._bundle = await asyncio.to_thread(TokenizerBundle.of, files)
        return self._bundle


def own_load(engine: GenerationEngine, tenant: str) -> tuple[int, int]:
    """``tenant``'s (running, waiting) requests on ``engine``."""
    for stats in engine.tenant_stats():
        if stats.tenant == tenant:
            return stats.running, stats.waiting
    return 0, 0
