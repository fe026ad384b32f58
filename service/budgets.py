"""Call budgets: RPCs served at once, streams of callers without a token, each tenant's open
streams and the highest priority its requests may carry.

Invariants: a unary health check is never counted nor refused; a streaming call to health or
reflection by a caller without a token counts against the anonymous budget only; every other call
counts against the RPC budget, and a named tenant's streaming calls against its stream limit too.
A count is taken before the handler runs and given back however the call ends. The interceptor is
listed after AuthInterceptor, so the caller's identity is set when it counts.
"""

from __future__ import annotations

import contextlib
import inspect
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import grpc

from engine.tenancy import Tenant

from .auth import REFLECTION_SERVICES
from .handlers import FACTORIES, HEALTH_SERVICE, behavior_of, is_probe, split_method
from .identity import Identity, current_identity
from .status import status_of

ANONYMOUS_SERVICES = frozenset({HEALTH_SERVICE, *REFLECTION_SERVICES})
RETRY_AFTER_S = 1.0
# What each refusal counts as (metrics' ``limit`` label) and its ErrorInfo reason.
RPCS, ANONYMOUS_STREAMS, TENANT_STREAMS, PRIORITY = "rpcs", "anonymous_streams", "tenant_streams", "priority"
REASONS = {RPCS: "TOO_MANY_RPCS", ANONYMOUS_STREAMS: "ANONYMOUS_STREAMS_EXHAUSTED",
           TENANT_STREAMS: "TENANT_STREAMS_EXHAUSTED", PRIORITY: "PRIORITY_ABOVE_TENANT_MAX"}


@dataclass(frozen=True)
class TenantCalls:
    tenant: str
    open_streams: int
    max_streams: int  # 0: no limit
    refused_streams: int
    max_priority: int
    refused_priorities: int


@dataclass(frozen=True)
class CallFigures:
    open_rpcs: int
    max_rpcs: int  # 0: no limit
    anonymous_streams: int
    max_anonymous_streams: int  # 0: no limit
    refused_rpcs: int
    refused_anonymous_streams: int
    tenants: tuple[TenantCalls, ...]


class _Lease:
    """One call's counts, given back once."""

    def __init__(self, budgets: CallBudgets, rpc: bool, anonymous: bool, tenant: str | None):
        self.budgets, self.rpc, self.anonymous, self.tenant = budgets, rpc, anonymous, tenant

    def release(self) -> None:
        b = self.budgets
        if self.rpc:
            b.open_rpcs -= 1
        if self.anonymous:
            b.anonymous_streams -= 1
        if self.tenant is not None:
            b.streams[self.tenant] -= 1
        self.rpc = self.anonymous = False
        self.tenant = None


class CallBudgets:
    """The counts and limits (0: none) of one server, touched only on its event loop."""

    def __init__(self, max_rpcs: int = 0, max_anonymous_streams: int = 0, max_tenant_streams: int = 0,
                 tenants: Mapping[str, Tenant] | None = None):
        if min(max_rpcs, max_anonymous_streams, max_tenant_streams) < 0:
            raise ValueError("call limits must be at least 0")
        self.max_rpcs = max_rpcs
        self.max_anonymous_streams = max_anonymous_streams
        self.max_tenant_streams = max_tenant_streams
        self.tenants = dict(tenants or {})
        self.open_rpcs = 0
        self.anonymous_streams = 0
        self.streams: Counter[str] = Counter()
        self.refused: Counter[tuple[str, str]] = Counter()  # (limit, tenant) -> calls

    def stream_limit(self, tenant: Tenant) -> int:
        return self.max_tenant_streams if tenant.max_streams is None else tenant.max_streams

    def admit(self, identity: Identity, *, streaming: bool, anonymous_service: bool) -> _Lease | grpc.Status:
        """The call's lease, or the status refusing it."""
        tenant = identity.tenant
        if streaming and anonymous_service and not tenant.name:
            if 0 < self.max_anonymous_streams <= self.anonymous_streams:
                return self._refuse(ANONYMOUS_STREAMS, "", (
                    f"{self.anonymous_streams} streams of callers without a token are open, the server's limit "
                    "(--max-anonymous-streams); retry later or call with a token"),
                    {"limit": str(self.max_anonymous_streams)})
            self.anonymous_streams += 1
            return _Lease(self, False, True, None)
        counted = streaming and bool(tenant.name)  # a server without tokens has one tenant: no per-tenant limit
        limit = self.stream_limit(tenant) if counted else 0
        if counted and 0 < limit <= self.streams[tenant.name]:
            return self._refuse(TENANT_STREAMS, tenant.name, (
                f"tenant {tenant.name} has {self.streams[tenant.name]} streaming calls open, its limit "
                "(max_streams); retry once one has ended"), {"tenant": tenant.name, "limit": str(limit)})
        if 0 < self.max_rpcs <= self.open_rpcs:
            return self._refuse(RPCS, tenant.name, (
                f"the server is serving {self.open_rpcs} RPCs at once, its limit (--max-concurrent-rpcs); "
                "retry later"), {"limit": str(self.max_rpcs)})
        self.open_rpcs += 1
        if counted:
            self.streams[tenant.name] += 1
        return _Lease(self, True, False, tenant.name if counted else None)

    def check_priority(self, identity: Identity, priority: int) -> grpc.Status | None:
        """INVALID_ARGUMENT (field ``priority``) for a priority above the tenant's max_priority."""
        tenant = identity.tenant
        if priority <= tenant.max_priority:
            return None
        self.refused[(PRIORITY, tenant.name)] += 1
        return status_of(grpc.StatusCode.INVALID_ARGUMENT, REASONS[PRIORITY],
                         f"priority {priority} is above this tenant's max_priority of {tenant.max_priority}",
                         metadata={"tenant": tenant.name, "max_priority": str(tenant.max_priority)},
                         field="priority")

    def _refuse(self, limit: str, tenant: str, message: str, metadata: dict[str, str]) -> grpc.Status:
        self.refused[(limit, tenant)] += 1
        return status_of(grpc.StatusCode.RESOURCE_EXHAUSTED, REASONS[limit], message, metadata=metadata,
                         retry_after_s=RETRY_AFTER_S)

    def figures(self) -> CallFigures:
        tenants = tuple(TenantCalls(name, self.streams[name], self.stream_limit(t),
                                    self.refused[(TENANT_STREAMS, name)], t.max_priority,
                                    self.refused[(PRIORITY, name)])
                        for name, t in sorted(self.tenants.items()))
        refused_rpcs = sum(n for (limit, _), n in self.refused.items() if limit == RPCS)
        return CallFigures(self.open_rpcs, self.max_rpcs, self.anonymous_streams, self.max_anonymous_streams,
                           refused_rpcs, self.refused[(ANONYMOUS_STREAMS, "")], tenants)


class BudgetInterceptor(grpc.aio.ServerInterceptor):
    """Counts every call but unary health checks against ``budgets``; refuses what is over."""

    def __init__(self, budgets: CallBudgets):
        self.budgets = budgets

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if handler is None:
            return None
        streaming = handler.request_streaming or handler.response_streaming
        if not streaming and is_probe(details.method):
            return handler  # probes always answer
        anonymous_service = split_method(details.method)[0] in ANONYMOUS_SERVICES
        inner = behavior_of(handler)

        async def admitted(request: Any, context: grpc.aio.ServicerContext) -> _Lease:
            identity = current_identity()
            priority = getattr(request, "priority", None) if not handler.request_streaming else None
            if isinstance(priority, int) and (refusal := self.budgets.check_priority(identity, priority)):
                await context.abort_with_status(refusal)
            lease = self.budgets.admit(identity, streaming=streaming, anonymous_service=anonymous_service)
            if isinstance(lease, grpc.Status):
                await context.abort_with_status(lease)
            return lease

        behavior: Callable
        if inspect.isasyncgenfunction(inner):
            async def behavior(request: Any, context: grpc.aio.ServicerContext):
                lease = await admitted(request, context)
                try:
                    async with contextlib.aclosing(inner(request, context)) as responses:
                        async for response in responses:
                            yield response
                finally:
                    lease.release()
        else:
            async def behavior(request: Any, context: grpc.aio.ServicerContext):
                lease = await admitted(request, context)
                try:
                    result = inner(request, context)
                    return await result if inspect.isawaitable(result) else result
                finally:
                    lease.release()

        factory = FACTORIES[(handler.request_streaming, handler.response_streaming)]
        return factory(behavior, request_deserializer=handler.request_deserializer,
                       response_serializer=handler.response_serializer)
