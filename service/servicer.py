"""The InferenceService servicer: each RPC checks, converts, calls the engine, converts back.

Invariants: identifier lengths and repeated-field counts are checked on the wire message
first; every method is ``@mapped``; file paths go only to admin callers.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import grpc
from google.protobuf.message import Message

from engine.errors import InvalidRequest
from engine.models import ModelSet, sized_limits, text_limit
from engine.validation import Limits, at_most, check_counts, check_ids, check_text_bytes

from . import convert, lifecycle_convert, pooling_convert, speech_convert
from .budgets import CallBudgets
from .gen.mlxgrpc.v1 import inference_service_pb2 as pb
from .gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from .gen.mlxgrpc.v1 import lifecycle_pb2 as lpb
from .identity import current_identity
from .load_report import call_load, model_load
from .status import MAX_MESSAGE_BYTES, ResponseTooLarge, mapped

_MAX_TOKENS = 2**31 - 1
MAX_ADAPTER_PATH = 4096  # characters of LoadAdapter's directory (PATH_MAX on Linux)


class InferenceServicer(pb_grpc.InferenceServiceServicer):
    def __init__(self, models: ModelSet, limits: Limits = Limits(), max_message_bytes: int = MAX_MESSAGE_BYTES,
                 budgets: CallBudgets | None = None):
        self.models = models
        self.budgets = budgets  # GetLoad's call figures
        self.limits = limits  # for identifiers, checked before a model is looked up
        self.max_message_bytes = max_message_bytes
        self.started = time.monotonic()

    @mapped()
    async def Generate(self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model, request_id=request.request_id,
                  session_id=request.session_id, adapter=request.adapter)
        async with self._using(request.model, self.models.generator, context, request) as (engine, adapter):
            check_counts(convert.generation_counts(request), sized_limits(engine))
            generation = convert.generation_request(request, current_identity().tenant)
            if adapter and not request.adapter:  # an alias of the model with one of its adapters
                generation = replace(generation, adapter=adapter)
            async for event in engine.generate(generation):
                yield convert.generate_response(event)

    @mapped()
    async def Embed(self, request: pb.EmbedRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model, request_id=request.request_id)
        async with self._using(request.model, self.models.embedder, context, request) as (engine, _):
            at_most("inputs", len(request.inputs), engine.limits.max_embed_inputs, "inputs")
            tenant = current_identity().tenant
            packed, kind = [], pooling_convert.embedding_layout(request)
            async for index, result in engine.embed(pooling_convert.embedding_request(request, tenant)):
                if kind is None:
                    yield pooling_convert.embed_response(index, result)
                    continue
                packed.append((index, result))
                if len(packed) == pooling_convert.PACKED_PER_MESSAGE:
                    yield pooling_convert.packed_response(packed, kind)
                    packed = []
            if packed and kind is not None:
                yield pooling_convert.packed_response(packed, kind)

    @mapped()
    async def Rerank(self, request: pb.RerankRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model, request_id=request.request_id)
        async with self._using(request.model, self.models.reranker, context) as (engine, _):
            at_most("documents", len(request.documents), engine.limits.max_embed_inputs, "documents")
            scores = await engine.rerank(pooling_convert.rerank_request(request, current_identity().tenant))
        return self._sendable(pooling_convert.rerank_response(engine.name, scores))

    @mapped()
    async def Classify(self, request: pb.ClassifyRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model, request_id=request.request_id)
        async with self._using(request.model, self.models.classifier, context) as (engine, _):
            at_most("inputs", len(request.inputs), engine.limits.max_embed_inputs, "inputs")
            results = await engine.classify(pooling_convert.classify_request(request, current_identity().tenant))
        return self._sendable(pooling_convert.classify_response(engine.name, results))

    @mapped()
    async def EmbedSparse(self, request: pb.EmbedSparseRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model, request_id=request.request_id)
        async with self._using(request.model, self.models.sparse_embedder, context) as (engine, _):
            at_most("inputs", len(request.inputs), engine.limits.max_embed_inputs, "inputs")
            results = await engine.embed_sparse(
                pooling_convert.embed_sparse_request(request, current_identity().tenant))
        return self._sendable(pooling_convert.embed_sparse_response(engine.name, results))

    @mapped()
    async def Transcribe(self, request, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model, request_id=request.request_id)
        async with self._using(request.model, self.models.transcriber, context) as (engine, _):
            transcription = speech_convert.transcription_request(request, current_identity().tenant)
            async for event in engine.transcribe(transcription):
                for response in speech_convert.responses(event, engine.name):
                    yield response

    @mapped()
    async def Cancel(self, request: pb.CancelRequest, context: grpc.aio.ServicerContext):
        if not request.request_id:
            raise InvalidRequest("request_id", "is required")
        check_ids(self.limits, request_id=request.request_id)
        cancelled = self.models.cancel(request.request_id, current_identity().tenant.name)
        return pb.CancelResponse(cancelled=cancelled)

    @mapped()
    async def GetModelInfo(self, request: pb.GetModelInfoRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model)
        return pb.GetModelInfoResponse(info=convert.model_info(self.models.any(request.model).describe(),
                                                                 current_identity().admin))

    @mapped()
    async def PlanMemory(self, request: pb.PlanMemoryRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model)
        # token counts are int32 throughout the API; larger ones overflow the plan's int64 bytes
        if not 0 <= request.context_tokens <= _MAX_TOKENS:
            raise InvalidRequest("context_tokens", f"must be between 0 and {_MAX_TOKENS}")
        if not 0 <= request.max_generation_tokens <= _MAX_TOKENS:
            raise InvalidRequest("max_generation_tokens", f"must be between 0 and {_MAX_TOKENS}")
        engine = self.models.generator(request.model)
        plan = await engine.plan_memory(request.context_tokens, request.max_generation_tokens)
        return pb.PlanMemoryResponse(plan=convert.memory_plan(plan))

    @mapped()
    async def Tokenize(self, request: pb.TokenizeRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model)
        async with self._using(request.model, self.models.any, context) as (engine, _):
            check_text_bytes("text", (request.text,), text_limit(engine))
            ids, tokens = await engine.tokenize_for(current_identity().tenant, request.text,
                                                    request.add_special_tokens)
        return self._sendable(pb.TokenizeResponse(token_ids=ids, tokens=tokens))

    @mapped()
    async def Detokenize(self, request: pb.DetokenizeRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model)
        async with self._using(request.model, self.models.any, context) as (engine, _):
            at_most("token_ids", len(request.token_ids), engine.describe().context_length, "token ids")
            text = await engine.detokenize_for(current_identity().tenant, list(request.token_ids),
                                               request.skip_special_tokens)
        return self._sendable(pb.DetokenizeResponse(text=text))

    @mapped()
    async def ListModels(self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext):
        caller = current_identity()
        residency = self.models.residency
        slots = residency.visible(caller.tenant.name, caller.admin)
        shown = {s.name for s in slots}
        return pb.ListModelsResponse(  # file paths and figures only for admins
            models=[convert.model_info(d, caller.admin) for d in self.models.describe_all() if d.name in shown],
            statuses=[lifecycle_convert.status(s, residency.aliases_of(s.name), caller.admin) for s in slots])

    @mapped()
    async def LoadModel(self, request, context: grpc.aio.ServicerContext):
        check_ids(self.limits, name=request.name)
        if not request.name:
            raise InvalidRequest("name", "is required")
        at_most("source", len(request.source), MAX_ADAPTER_PATH, "characters")
        at_most("options.draft_model", len(request.options.draft_model), MAX_ADAPTER_PATH, "characters")
        kind, options = lifecycle_convert.load_options(request)
        keep = (lifecycle_convert.keep_alive(request.keep_alive_seconds)
                if request.HasField("keep_alive_seconds") else None)
        admin = current_identity().admin
        # wait_s 0: no room now (every other model in use) is RESOURCE_EXHAUSTED at once, with RetryInfo
        async for event in self.models.residency.load(request.name, request.source, kind, options, keep, wait_s=0):
            yield lifecycle_convert.progress(event, admin)

    @mapped()
    async def UnloadModel(self, request, context: grpc.aio.ServicerContext):
        check_ids(self.limits, name=request.name)
        if not request.name:
            raise InvalidRequest("name", "is required")
        freed, state = await self.models.residency.unload(request.name, request.cancel_requests)
        return lpb.UnloadModelResponse(name=request.name, freed_bytes=freed, state=lifecycle_convert.STATES[state])

    @mapped()
    async def GetLoad(self, request: pb.GetLoadRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model)
        engines = ([self.models.generator(request.model)] if request.model
                   else [e for e in self.models.generation if e.ready])
        stats = await asyncio.gather(*(e.stats() for e in engines))
        caller = current_identity()
        everyone = caller.router  # the router and admin roles; others: their own tenant's figures only
        shown = [tuple(t for t in s.tenants if everyone or t.tenant == caller.tenant.name) for s in stats]
        residency = self.models.residency
        loads = [model_load(e.name, s, e.config.scheduler.max_active, tenants)
                 for e, s, tenants in zip(engines, stats, shown)]
        if everyone:
            for load, engine in zip(loads, engines):
                load.resident_bytes = engine.weights_bytes
        return pb.GetLoadResponse(
            models=loads, uptime_seconds=time.monotonic() - self.started,
            calls=call_load(self.budgets.figures(), caller.tenant.name, everyone) if self.budgets else None,
            model_loads=residency.loads, model_unloads=residency.unloads)

    @mapped()
    async def LoadAdapter(self, request: pb.LoadAdapterRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model, name=request.name)
        at_most("path", len(request.path), MAX_ADAPTER_PATH, "characters")
        adapters = self.models.generator(request.model).adapters
        loaded = await adapters.load(request.name, request.path)
        return pb.LoadAdapterResponse(adapter=convert.adapter_info(loaded.info), evicted=loaded.evicted)

    @mapped()
    async def UnloadAdapter(self, request: pb.UnloadAdapterRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model, name=request.name)
        info = await self.models.generator(request.model).adapters.unload(request.name)
        return pb.UnloadAdapterResponse(adapter=convert.adapter_info(info))

    @mapped()
    async def ListAdapters(self, request: pb.ListAdaptersRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model)
        engine = self.models.generator(request.model)
        return pb.ListAdaptersResponse(model=engine.name, max_adapters=engine.adapters.limit,
                                       adapters=[convert.adapter_info(a, current_identity().admin)
                                                 for a in engine.adapters.infos()])

    @mapped()
    async def Prefetch(self, request: pb.PrefetchRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model, session_id=request.session_id, adapter=request.adapter)
        async with self._using(request.model, self.models.generator, context) as (engine, _):
            check_counts(convert.generation_counts(request), sized_limits(engine))
            fetched = await engine.prefetch(convert.prefetch_request(request, current_identity().tenant))
        return convert.prefetch_response(fetched)

    @mapped()
    async def CloseSession(self, request: pb.CloseSessionRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, model=request.model, session_id=request.session_id)
        engine = self.models.generator(request.model)
        entries = await engine.close_session(request.session_id, current_identity().tenant.name)
        return pb.CloseSessionResponse(entries=entries)

    def _using(self, name: str, pick, context: grpc.aio.ServicerContext, request=None):
        """The engine ``name`` selects (``pick``), loaded first when it is an unloaded catalog model
        (waiting at most the call's deadline) and held for the call; yields (engine, alias adapter)."""
        caller = current_identity()
        residency = self.models.residency
        most = caller.tenant.max_keep_alive_s
        most = residency.lifecycle.max_keep_alive_s if most is None else most
        keep = lifecycle_convert.request_keep_alive(request, most) if request is not None else None
        return residency.use(name, pick, caller.tenant.name, keep, context.time_remaining())

    def _sendable(self, reply: Message) -> Message:
        """``reply`` if it fits the server's message limit, else ResponseTooLarge."""
        size = reply.ByteSize()
        if size > self.max_message_bytes:
            raise ResponseTooLarge(size, self.max_message_bytes)
        return reply
