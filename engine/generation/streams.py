"""The event loop's view of requests: one ``Stream`` each, and their registry. Ids are
scoped by tenant; counts come from events alone; events after a Finished are ignored."""

from __future__ import annotations

import asyncio
import itertools
from typing import Callable

from ..errors import DuplicateRequestId
from ..events import Delta, Event, FinishReason, Finished, Started, Timings, Usage
from ..tenancy import ANONYMOUS, Tenant
from .ledgers import Tenants


class Stream:
    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop,
                 on_event: Callable[["Stream", Event], None], tenant: Tenant = ANONYMOUS, key: str = ""):
        self.request_id = request_id  # unique within its tenant
        self.tenant = tenant
        self.key = key or request_id  # the engine thread's id of the request
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.submitted = False
        self.started = False
        self.finished = False
        self.cancel_requested = False
        self.closers: list[Callable[[], None]] = []  # run once, at close
        self._loop = loop
        self._on_event = on_event

    def sink(self, event: Event) -> None:
        """Engine thread."""
        try:
            self._loop.call_soon_threadsafe(self._deliver, event)
        except RuntimeError:  # the loop is closed: nobody is listening
            pass

    def _deliver(self, event: Event) -> None:
        if self.finished:
            return
        self._on_event(self, event)
        self.events.put_nowait(event)

    def close(self) -> None:
        closers, self.closers = self.closers, []
        for closer in closers:
            closer()


class Streams:
    def __init__(self, tenants: Tenants | None = None) -> None:
        self._open: dict[tuple[str, str], Stream] = {}
        self._serial = itertools.count()
        self.tenants = tenants if tenants is not None else Tenants("")
        self.in_flight = 0
        self.running = 0

    def __len__(self) -> int:
        return len(self._open)

    def get(self, request_id: str, tenant: str = "") -> Stream | None:
        return self._open.get((tenant, request_id))

    def open(self, request_id: str, tenant: Tenant = ANONYMOUS) -> Stream:
        """Counted in flight from now; raises DuplicateRequestId or TenantLimit."""
        if (tenant.name, request_id) in self._open:
            raise DuplicateRequestId(f"request id {request_id!r} is already running",
                                     metadata={"request_id": request_id})
        self.tenants.admit(tenant)
        key = f"{request_id}\x1f{tenant.name}\x1f{next(self._serial)}"
        stream = Stream(request_id, asyncio.get_running_loop(), self._on_event, tenant, key)
        self._open[(tenant.name, request_id)] = stream
        return stream

    def submitted(self, stream: Stream, prompt_tokens: int) -> None:
        """TenantLimit if the prompt does not fit the tenant's tokens per minute."""
        self.tenants.submit(stream.tenant, prompt_tokens)
        stream.submitted = True
        self.in_flight += 1

    def abandon(self, stream: Stream) -> None:
        if not stream.submitted and self._open.pop((stream.tenant.name, stream.request_id), None) is stream:
            self.tenants.closed(stream.tenant.name, False, False)
            stream.close()

    def fail_submitted(self, error: str) -> None:
        """Ends every submitted stream with ERROR without the (dead or stuck) engine thread."""
        for stream in [s for s in self._open.values() if s.submitted and not s.finished]:
            stream._deliver(Finished(FinishReason.ERROR, Usage(0, 0, 0), Timings(0.0, 0.0, 0.0, 0.0), error=error))

    def _on_event(self, stream: Stream, event: Event) -> None:
        name = stream.tenant.name
        if isinstance(event, Started) and not stream.started:
            stream.started = True
            self.running += 1
            self.tenants.started(name)
        elif isinstance(event, Delta) and event.token_ids:
            self.tenants.generated(name, len(event.token_ids))
        elif isinstance(event, Finished) and not stream.finished:
            stream.finished = True
            self.in_flight -= 1
            self.running -= stream.started
            self.tenants.closed(name, True, stream.started)
            self._open.pop((name, stream.request_id), None)
            stream.close()
