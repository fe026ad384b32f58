"""The InferenceService servicer: each RPC converts, calls the engine, converts back.

Errors leave through ``status.abort`` only; a stream that fails after it started
ends with that status, never silently.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from engine.errors import EngineError, InvalidRequest, Unsupported
from engine.models import ModelSet

from . import convert
from .gen.mlxgrpc.v1 import inference_service_pb2 as pb
from .gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from .status import abort

log = logging.getLogger("service.servicer")
_MAX_TOKENS = 2**31 - 1


class InferenceServicer(pb_grpc.InferenceServiceServicer):
    def __init__(self, models: ModelSet):
        self.models = models

    async def Generate(self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext):
        try:
            req = convert.generation_request(request)
            engine = self.models.generator(req.model)
            async for event in engine.generate(req):
                yield convert.generate_response(event)
        except Exception as exc:  # noqa: BLE001 - mapped to a status in one place
            await abort(context, exc, request.request_id)

    async def Embed(self, request: pb.EmbedRequest, context: grpc.aio.ServicerContext):
        try:
            req = convert.embedding_request(request)
            engine = self.models.embedder(req.model)
            async for index, result in engine.embed(req):
                yield pb.EmbedResponse(index=index, embedding=result.vector.tolist(), tokens=result.tokens)
        except ValueError as exc:  # the encoder's own input checks
            await abort(context, InvalidRequest("inputs", str(exc)), request.request_id)
        except Exception as exc:  # noqa: BLE001
            await abort(context, exc, request.request_id)

    async def Cancel(self, request: pb.CancelRequest, context: grpc.aio.ServicerContext):
        if not request.request_id:
            await abort(context, InvalidRequest("request_id", "is required"))
        return pb.CancelResponse(cancelled=self.models.cancel(request.request_id))

    async def GetModelInfo(self, request: pb.GetModelInfoRequest, context: grpc.aio.ServicerContext):
        try:
            return pb.GetModelInfoResponse(info=convert.model_info(self.models.any(request.model).describe()))
        except Exception as exc:  # noqa: BLE001
            await abort(context, exc)

    async def PlanMemory(self, request: pb.PlanMemoryRequest, context: grpc.aio.ServicerContext):
        try:
            # token counts are int32 throughout the API; larger ones overflow the plan's int64 bytes
            if not 0 <= request.context_tokens <= _MAX_TOKENS:
                raise InvalidRequest("context_tokens", f"must be between 0 and {_MAX_TOKENS}")
            if not 0 <= request.max_generation_tokens <= _MAX_TOKENS:
                raise InvalidRequest("max_generation_tokens", f"must be between 0 and {_MAX_TOKENS}")
            engine = self.models.generator(request.model)
            plan = await engine.plan_memory(request.context_tokens, request.max_generation_tokens)
            return pb.PlanMemoryResponse(plan=convert.memory_plan(plan))
        except Exception as exc:  # noqa: BLE001
            await abort(context, exc)

    async def Tokenize(self, request: pb.TokenizeRequest, context: grpc.aio.ServicerContext):
        try:
            engine = self.models.any(request.model)
            ids, tokens = await asyncio.to_thread(engine.tokenize, request.text, request.add_special_tokens)
            return pb.TokenizeResponse(token_ids=ids, tokens=tokens)
        except Exception as exc:  # noqa: BLE001
            await abort(context, exc)

    async def Detokenize(self, request: pb.DetokenizeRequest, context: grpc.aio.ServicerContext):
        try:
            engine = self.models.any(request.model)
            text = await asyncio.to_thread(engine.detokenize, list(request.token_ids),
                                           request.skip_special_tokens)
            return pb.DetokenizeResponse(text=text)
        except Exception as exc:  # noqa: BLE001
            await abort(context, exc)

    async def ListModels(self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext):
        return pb.ListModelsResponse(models=[convert.model_info(d) for d in self.models.describe_all()])

    async def LoadAdapter(self, request: pb.LoadAdapterRequest, context: grpc.aio.ServicerContext):
        try:
            adapters = self.models.generator(request.model).adapters
            loaded = await adapters.load(request.name, request.path)
            return pb.LoadAdapterResponse(adapter=convert.adapter_info(loaded.info), evicted=loaded.evicted)
        except Exception as exc:  # noqa: BLE001
            await abort(context, exc)

    async def UnloadAdapter(self, request: pb.UnloadAdapterRequest, context: grpc.aio.ServicerContext):
        try:
            info = await self.models.generator(request.model).adapters.unload(request.name)
            return pb.UnloadAdapterResponse(adapter=convert.adapter_info(info))
        except Exception as exc:  # noqa: BLE001
            await abort(context, exc)

    async def ListAdapters(self, request: pb.ListAdaptersRequest, context: grpc.aio.ServicerContext):
        try:
            engine = self.models.generator(request.model)
            return pb.ListAdaptersResponse(model=engine.name, max_adapters=engine.adapters.limit,
                                           adapters=[convert.adapter_info(a) for a in engine.adapters.infos()])
        except Exception as exc:  # noqa: BLE001
            await abort(context, exc)
