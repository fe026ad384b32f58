"""``vllm.grpc.engine.VllmEngine``: SMG's full worker contract (constraints, stop strings, n,
embeddings, loads, KV events, cache flush), on the one model the worker contracts serve.

Invariants: the n samples of a request are the engine's n choices of one request (one prompt
prefill; one fails or is cancelled: all are); KV events and FlushCache need the router or admin
role (the interceptor checks it); GetLoads gives other roles their own requests' figures and the
capacities only; every KV event batch carries the load.
"""

from __future__ import annotations

import itertools
import time

import grpc
from smg_grpc_proto import vllm_engine_pb2 as vllm_pb
from smg_grpc_proto import vllm_engine_pb2_grpc as vllm_grpc
from smg_grpc_proto.generated import common_pb2

from engine.caches.blocks import CacheCleared, EventBatch
from engine.events import Delta, Finished
from engine.generation.frontend.engine import GenerationEngine
from engine.models import sized_limits
from engine.validation import check_counts, check_ids

from ..calls import finished
from ..identity import current_identity
from ..status import mapped
from . import convert, vllm_convert
from .base import ContractServicer, own_load

SERVICE_NAME = vllm_pb.DESCRIPTOR.services_by_name["VllmEngine"].full_name
PROFILING = "profiling is not supported by this worker"
HEARTBEAT_S = 1.0  # a KV event stream's load record while nothing is stored or removed


class VllmWorkerServicer(ContractServicer, vllm_grpc.VllmEngineServicer):
    pb = vllm_pb

    @mapped(vllm_convert.in_contract_terms)
    async def Generate(self, request: vllm_pb.GenerateRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, request_id=request.request_id)
        engine = self._engine()
        check_counts(convert.generation_counts(request), sized_limits(engine))
        engine_request = vllm_convert.generation_request(request, current_identity().tenant, self.adapter,
                                                         self.limits.max_json_bytes)
        replies = [convert.Responses(vllm_pb, request.stream, index) for index in range(engine_request.n)]
        async for event in engine.generate(engine_request):
            if not isinstance(event, (Delta, Finished)):  # the request's (Started...): every sample's
                for reply in replies:
                    reply.add(event)
                continue
            if isinstance(event, Finished):
                finished(event.timings)  # the tracing spans' phases (this contract's reply has no timings)
            message = replies[event.choice].add(event)
            if message is not None:
                yield self._sendable(message, request.stream)

    def _cancel(self, request_id: str, tenant: str) -> None:
        self.models.cancel(request_id, tenant)

    @mapped()
    async def Embed(self, request: vllm_pb.EmbedRequest, context: grpc.aio.ServicerContext):
        check_ids(self.limits, request_id=request.request_id)
        engine = self.models.embedder(self._name())
        self._named(engine)
        async for _, result in engine.embed(vllm_convert.embedding_request(request, current_identity().tenant)):
            return vllm_pb.EmbedResponse(embedding=result.vector.tolist(), prompt_tokens=result.tokens,
                                         embedding_dim=len(result.vector))

    @mapped()
    async def GetLoads(self, request: vllm_pb.GetLoadsRequest, context: grpc.aio.ServicerContext):
        engine = self._engine()
        s = await engine.stats()
        per_token = engine.kv_bytes_per_token
        max_active = engine.config.scheduler.max_active
        capacity = vllm_pb.SchedulerLoad(
            max_total_num_tokens=(s.budget_bytes or 0) // per_token if per_token else 0,
            max_running_requests=max_active)
        caller = current_identity()
        if caller.router:
            lookups = s.prefix_hits + s.prefix_misses
            load = vllm_pb.SchedulerLoad(
                num_running_reqs=s.running, num_waiting_reqs=s.waiting, num_total_reqs=s.running + s.waiting,
                num_used_tokens=s.kv_bytes // per_token if per_token else 0,
                token_usage=s.reserved_bytes / s.budget_bytes if s.budget_bytes else 0.0,
                gen_throughput=s.recent_tokens_per_s, cache_hit_rate=s.prefix_hits / lookups if lookups else 0.0,
                utilization=s.running / max_active if max_active else 0.0)
        else:  # another tenant's requests, memory or throughput would tell this one what they do
            running, waiting = own_load(engine, caller.tenant.name)
            load = vllm_pb.SchedulerLoad(num_running_reqs=running, num_waiting_reqs=waiting,
                                         num_total_reqs=running + waiting)
        load.MergeFrom(capacity)
        return vllm_pb.GetLoadsResponse(timestamp=_now_iso(), version=convert.SERVER_TYPE, dp_rank_count=1,
                                        loads=[load])

    @mapped()
    async def FlushCache(self, request: common_pb2.FlushCacheRequest, context: grpc.aio.ServicerContext):
        dropped = await self._engine().flush_prefix_cache()
        return common_pb2.FlushCacheResponse(success=True, message=f"dropped {dropped} prefix cache entries")

    @mapped()
    async def SubscribeKvEvents(self, request: common_pb2.SubscribeKvEventsRequest,
                                context: grpc.aio.ServicerContext):
        engine = self._engine()
        records = itertools.count(1)
        cursor = request.start_sequence_number
        async for batch in engine.blocks.batches(cursor, heartbeat_s=HEARTBEAT_S):
            if batch is None or (batch.sequence == 0 and not _has_blocks(batch)):  # nothing stored yet
                if cursor or request.load_records_before_first_batch:
                    yield common_pb2.KvEventBatch(sequence_number=cursor, timestamp=time.time(),
                                                  load=_load(engine, next(records), load_only=True))
                continue
            cursor = batch.sequence
            yield vllm_convert.kv_event_batch(batch, engine.blocks.block_size, _load(engine, next(records)))

    @mapped()
    async def StartProfile(self, request: common_pb2.StartProfileRequest, context: grpc.aio.ServicerContext):
        return common_pb2.ProfileResponse(success=False, message=PROFILING)

    @mapped()
    async def StopProfile(self, request: common_pb2.StopProfileRequest, context: grpc.aio.ServicerContext):
        return common_pb2.ProfileResponse(success=False, message=PROFILING)


def _has_blocks(batch: EventBatch) -> bool:
    return any(not isinstance(event, CacheCleared) for event in batch.events)


def _load(engine: GenerationEngine, sample: int, load_only: bool = False) -> common_pb2.EngineLoad:
    """What the event loop knows of the engine's load right now (no engine-thread round trip)."""
    return common_pb2.EngineLoad(running_requests=engine.active, waiting_requests=engine.queued,
                                 max_running_requests=engine.config.scheduler.max_active, sample=sample,
                                 load_only=load_only)


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
