"""``mlx.grpc.engine.MlxEngine``: the worker contract, on the first generation model.

Invariants: it goes through the same engine, limits and ``@mapped`` errors as InferenceService;
requests run as the caller's tenant, and Abort reaches only its ids.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import grpc
from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
from smg_grpc_proto import mlx_engine_pb2_grpc as mlx_grpc

from engine.errors import EngineError
from engine.events import Finished
from engine.generation.engine import GenerationEngine
from engine.models import ModelSet, sized_limits
from engine.validation import Limits, at_most, check_counts, check_ids

from ..calls import current_call, finished
from ..identity import current_identity
from ..interceptors import ServerState
from ..status import MAX_MESSAGE_BYTES, ResponseTooLarge, mapped
from . import convert
from .tokenizer_bundle import TokenizerBundle

SERVICE_NAME = mlx_pb.DESCRIPTOR.services_by_name["MlxEngine"].full_name
MAX_ABORT_IDS = 1024  # request ids one Abort may name (more: INVALID_ARGUMENT naming request_ids)


class WorkerServicer(mlx_grpc.MlxEngineServicer):
    def __init__(self, models: ModelSet, state: ServerState, limits: Limits = Limits(),
                 max_message_bytes: int = MAX_MESSAGE_BYTES):
        self.models = models
        self.state = state
        self.limits = limits  # for the request id, checked before the model is looked up
        self.max_message_bytes = max_message_bytes
        self.started = time.monotonic()
        self._files: dict[str, bytes] | None = None
        self._bundle: TokenizerBundle | None = None

    def _engine(self) -> GenerationEngine:
        engine = self.models.generator("")
        call = current_call()
        if call is not None:
            call.model = engine.name
        return engine

    @mapped(convert.in_contract_terms)
    async def Generate(self, request: mlx_pb.GenerateRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, request_id=request.request_id)
        engine = self._engine()
        check_counts(convert.generation_counts(request), sized_limits(engine))
        responses = convert.Responses(request.stream)
        request_ = dataclasses.replace(convert.generation_request(request), tenant=current_identity().tenant)
        async for event in engine.generate(request_):
            if isinstance(event, Finished):
                finished(event.timings)  # the tracing spans' phases (this contract's reply has no timings)
            message = responses.add(event)
            if message is not None and not request.stream:
                size = message.ByteSize()

                if size > self.max_message_bytes:
                    raise ResponseTooLarge(size, self.max_message_bytes)
            if message is not None:
                yield message

    @mapped()
    async def HealthCheck(self, request: mlx_pb.HealthCheckRequest, context: grpc.aio.ServicerContext):
        if self.state.draining:
            return mlx_pb.HealthCheckResponse(healthy=False, message="draining")
        try:
            self.models.generator("")
        except EngineError as exc:
            return mlx_pb.HealthCheckResponse(healthy=False, message=exc.message)
        return mlx_pb.HealthCheckResponse(healthy=True, message="OK")

    @mapped()
    async def Abort(self, request: mlx_pb.AbortRequest, context: grpc.aio.ServicerContext):
        at_most("request_ids", len(request.request_ids), MAX_ABORT_IDS, "request ids")
        tenant = current_identity().tenant.name
        for request_id in request.request_ids:
            if request_id:
                self.models.cancel(request_id, tenant)
        return mlx_pb.AbortResponse()

    @mapped()
    async def GetModelInfo(self, request: mlx_pb.GetModelInfoRequest, context: grpc.aio.ServicerContext):
        engine = self._engine()
        files = await self._tokenizer_files(engine)
        return convert.model_info(engine.describe(), files, engine.max_prompt_tokens)

    @mapped()
    async def GetServerInfo(self, request: mlx_pb.GetServerInfoRequest, context: grpc.aio.ServicerContext):
        active = sum(e.active + e.queued for e in self.models.generation)
        return mlx_pb.GetServerInfoResponse(server_type=convert.SERVER_TYPE, active_requests=active,
                                            uptime_seconds=time.monotonic() - self.started)

    @mapped()
    async def GetTokenizer(self, request, context: grpc.aio.ServicerContext):
        bundle = await self._tokenizer_bundle(self._engine())
        for chunk in bundle.chunks():
            yield chunk

    async def _tokenizer_files(self, engine: GenerationEngine) -> dict[str, bytes]:
        if self._files is None:
            self._files = await asyncio.to_thread(engine.tokenizer_files)
        return self._files

    async def _tokenizer_bundle(self, engine: GenerationEngine) -> TokenizerBundle:
        if self._bundle is None:
            files = await self._tokenizer_files(engine)
            self._bundle = await asyncio.to_thread(TokenizerBundle.of, files)
        return self._bundle
