"""The requests one embedding engine holds, by (tenant name, request id): what Cancel finds;
each is counted at the shared tenant gate (``serving.admission``).

Invariants: a request id is held once per tenant, from before admission to the request's end;
a tenant's count covers its held requests and its preparation jobs (Tokenize, Detokenize); a
Cancel call ends the holder with RequestCancelled, the caller's own cancellation stays a
CancelledError.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Iterator

from ..errors import NotReady, QueueFull, RequestCancelled, echo
from ..serving.admission import OpenRequests, Tenants
from ..tenancy import Tenant
from .admission_pool import AdmissionClosed, AdmissionPool, AdmissionRejected


class Seat:
    """A request counted at the gate: ``begin`` once it holds a batch slot, ``charge`` the
    tokens it reads."""

    def __init__(self, tenants: Tenants, tenant: Tenant):
        self._tenants, self._tenant = tenants, tenant
        self.began = False

    def begin(self) -> None:
        self._tenants.began(self._tenant.name)
        self.began = True

    def charge(self, tokens: int) -> None:
        self._tenants.charge(self._tenant, tokens)


class Slots:
    def __init__(self, model: str):
        self.tenants = Tenants(model)  # the gate: every tenant limit, counted here
        self.running: OpenRequests[asyncio.Task] = OpenRequests()
        self._cancelled: set[tuple[str, str]] = set()  # of running: cancelled by a Cancel call

    @property
    def idle(self) -> bool:
        """No request is held and no tenant counted."""
        return not self.running and not any(t.in_flight for t in self.tenants.snapshot())

    def holds(self, request_id: str, tenant: str = "") -> bool:
        return (tenant, request_id) in self.running

    def cancel(self, request_id: str, tenant: str = "") -> bool:
        slot = (tenant, request_id)
        task = self.running.get(*slot)
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
        task = asyncio.current_task()
        assert task is not None  # an async context manager runs in a task
        self.running.hold(*slot, task)  # DuplicateRequestId
        try:
            with self.counted(tenant) as seat:
                yield seat
        except asyncio.CancelledError:
            if slot not in self._cancelled:
                raise  # the caller went away
            if (uncancel := getattr(asyncio.current_task(), "uncancel", None)) is not None:
                uncancel()
            raise RequestCancelled(f"request {echo(slot[1])} was cancelled by a Cancel call") from None
        finally:
            self._cancelled.discard(slot)
            self.running.release(*slot, task)

    @contextlib.asynccontextmanager
    async def admitted(self, pool: AdmissionPool, request_id: str, tenant: Tenant, priority: int, queue: str):
        """``held``, then a lease of ``pool`` (in its fair order) while the block runs: QueueFull
        when the ``queue`` is full, NotReady once the pool is closed."""
        async with self.held(request_id, tenant) as seat:
            try:
                lease = await pool.acquire(priority, tenant)
            except AdmissionRejected:
                raise QueueFull(f"the {queue} queue is full; retry later") from None
            except AdmissionClosed:
                raise NotReady("the server is shutting down") from None
            with lease:
                seat.begin()
                yield seat

    @contextlib.contextmanager
    def counted(self, tenant: Tenant) -> Iterator[Seat]:
        """One more of ``tenant``'s requests in flight while the block runs; TenantLimit at
        any of its limits."""
        self.tenants.admit(tenant)
        seat = Seat(self.tenants, tenant)
        try:
            yield seat
        finally:
            self.tenants.closed(tenant.name, False, seat.began)
