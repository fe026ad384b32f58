"""The event loop's view of requests: one ``Stream`` each (its n choices feed it), and their
registry. Ids are scoped by tenant; counts come from events alone, a request of n choices
counting n; a stream finishes with the last choice's Finished, and ignores events after it."""

from __future__ import annotations

import asyncio
import itertools
from typing import Callable

from ...events import Delta, Event, Finished, FinishReason, Started, Timings, Usage
from ...serving.admission import OpenRequests, Tenants
from ...tenancy import ANONYMOUS, Tenant


class Stream:
    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop,
                 on_event: Callable[["Stream", Event], None], tenant: Tenant = ANONYMOUS, key: str = "",
                 choices: int = 1):
        self.request_id = request_id  # unique within its tenant
        self.choices = choices
        self.ended: set[int] = set()  # choices whose Finished came
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
        self._open: OpenRequests[Stream] = OpenRequests()
        self._serial = itertools.count()
        self.tenants = tenants if tenants is not None else Tenants("")
        self.in_flight = 0
        self.running = 0

    def __len__(self) -> int:
        return len(self._open)

    @property
    def sequences(self) -> int:
        """Open requests' choices, together."""
        return sum(s.choices for s in self._open.values())

    def get(self, request_id: str, tenant: str = "") -> Stream | None:
        return self._open.get(tenant, request_id)

    def open(self, request_id: str, tenant: Tenant = ANONYMOUS, choices: int = 1) -> Stream:
        """Counted in flight from now; raises DuplicateRequestId or TenantLimit."""
        key = f"{request_id}\x1f{tenant.name}\x1f{next(self._serial)}"
        stream = Stream(request_id, asyncio.get_running_loop(), self._on_event, tenant, key, choices)
        self._open.hold(tenant.name, request_id, stream)
        try:
            self.tenants.admit(tenant, choices)
        except BaseException:
            self._open.release(tenant.name, request_id, stream)
            raise
        return stream

    def submitted(self, stream: Stream, prompt_tokens: int) -> None:
        """TenantLimit if the prompt does not fit the tenant's tokens per minute."""
        self.tenants.submit(stream.tenant, prompt_tokens, stream.choices)
        stream.submitted = True
        self.in_flight += stream.choices

    def abandon(self, stream: Stream) -> None:
        if not stream.submitted and self._open.release(stream.tenant.name, stream.request_id, stream):
            self.tenants.closed(stream.tenant.name, False, False, stream.choices)
            stream.close()

    def fail_submitted(self, error: str) -> None:
        """Ends every submitted stream with ERROR without the (dead or stuck) engine thread."""
        for stream in [s for s in self._open.values() if s.submitted and not s.finished]:
            for choice in [c for c in range(stream.choices) if c not in stream.ended]:
                stream._deliver(Finished(FinishReason.ERROR, Usage(0, 0, 0), Timings(0.0, 0.0, 0.0, 0.0),
                                         error=error, choice=choice))

    def _on_event(self, stream: Stream, event: Event) -> None:
        name = stream.tenant.name
        if isinstance(event, Started) and not stream.started:
            stream.started = True
            self.running += stream.choices
            self.tenants.started(name, stream.choices)
        elif isinstance(event, Delta) and event.token_ids:
            self.tenants.generated(name, len(event.token_ids))
        elif isinstance(event, Finished) and not stream.finished and event.choice not in stream.ended:
            stream.ended.add(event.choice)  # each choice leaves the counts as it ends
            self.in_flight -= 1
            self.running -= stream.started
            self.tenants.closed(name, True, stream.started)
            if len(stream.ended) < stream.choices:
                return
            stream.finished = True
            self._open.release(name, stream.request_id, stream)
            stream.close()
