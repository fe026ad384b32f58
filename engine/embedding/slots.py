"""The requests one embedding engine holds, by (tenant name, request id): what Cancel finds, and
each tenant's count against its ``max_in_flight``.

Invariants: a request id is held once per tenant, from before admission to the request's end;
a tenant's count covers its held requests and its preparation jobs (Tokenize, Detokenize); a
Cancel call ends the holder with RequestCancelled, the caller's own cancellation stays a
CancelledError.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from ..errors import DuplicateRequestId, RequestCancelled, TenantLimit, echo
from ..tenancy import Tenant


class Slots:
    def __init__(self, model: str):
        self.model = model  # the engine's name, for TenantLimit's message
        self.running: dict[tuple[str, str], asyncio.Task] = {}  # by (tenant name, request id)
        self._cancelled: set[tuple[str, str]] = set()  # of running: cancelled by a Cancel call
        self._per_tenant: dict[str, int] = {}  # requests open per tenant name

    @property
    def idle(self) -> bool:
        """No request is held and no tenant counted."""
        return not self.running and not self._per_tenant

    def cancel(self, request_id: str, tenant: str = "") -> bool:
        slot = (tenant, request_id)
        task = self.running.get(slot)
        if task is None:
            return False
        if slot not in self._cancelled:
            self._cancelled.add(slot)
            task.cancel()
        return True

    @contextlib.asynccontextmanager
    async def held(self, request_id: str, tenant: Tenant):
        """The current task holds ``request_id`` (a fresh one when empty) and counts in its tenant's
        requests while the block runs."""
        slot = (tenant.name, request_id or uuid.uuid4().hex)
        if slot in self.running:
            raise DuplicateRequestId(f"request id {slot[1]!r} is already running")
        with self.counted(tenant):
            self.running[slot] = asyncio.current_task()  # type: ignore[assignment]
            try:
                yield
            except asyncio.CancelledError:
                if slot not in self._cancelled:
                    raise  # the caller went away
                if (uncancel := getattr(asyncio.current_task(), "uncancel", None)) is not None:
                    uncancel()
                raise RequestCancelled(f"request {echo(slot[1])} was cancelled by a Cancel call") from None
            finally:
                self._cancelled.discard(slot)
                self.running.pop(slot, None)

    @contextlib.contextmanager
    def counted(self, tenant: Tenant):
        """One more of ``tenant``'s requests in flight while the block runs; TenantLimit at its
        ``max_in_flight``."""
        held = self._per_tenant.get(tenant.name, 0)
        if tenant.max_in_flight and held >= tenant.max_in_flight:
            who = repr(tenant.name) if tenant.name else "anonymous"
            raise TenantLimit(f"tenant {who} has {held} requests in flight on model {self.model!r}; its "
                              f"max_in_flight is {tenant.max_in_flight}; retry later", tenant=tenant.name,
                              limit="max_in_flight", value=tenant.max_in_flight)
        self._per_tenant[tenant.name] = held + 1
        try:
            yield
        finally:
            self._per_tenant[tenant.name] -= 1
            if not self._per_tenant[tenant.name]:
                del self._per_tenant[tenant.name]
