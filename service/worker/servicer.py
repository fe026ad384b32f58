"""``mlx.grpc.engine.MlxEngine``: SMG's narrow MLX worker contract, on the first generation model."""

from __future__ import annotations

import dataclasses

import grpc
from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
from smg_grpc_proto import mlx_engine_pb2_grpc as mlx_grpc

from engine.events import Finished
from engine.models import sized_limits
from engine.validation import check_counts, check_ids

from ..calls import finished
from ..identity import current_identity
from ..status import mapped
from . import convert
from .base import MAX_ABORT_IDS, ContractServicer  # noqa: F401  (MAX_ABORT_IDS: the contract's limit)

SERVICE_NAME = mlx_pb.DESCRIPTOR.services_by_name["MlxEngine"].full_name


class WorkerServicer(ContractServicer, mlx_grpc.MlxEngineServicer):
    pb = mlx_pb

    @mapped(convert.in_contract_terms)
    async def Generate(self, request: mlx_pb.GenerateRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, request_id=request.request_id)
        engine = self._engine()
        check_counts(convert.generation_counts(request), sized_limits(engine))
        responses = convert.Responses(mlx_pb, request.stream)
        request_ = dataclasses.replace(convert.generation_request(request), tenant=current_identity().tenant,
                                       adapter=self.adapter)
        async for event in engine.generate(request_):
            if isinstance(event, Finished):
                finished(event.timings)  # the tracing spans' phases (this contract's reply has no timings)
            message = responses.add(event)
            if message is not None:
                yield self._sendable(message, request.stream)
