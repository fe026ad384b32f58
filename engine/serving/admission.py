"""The one gate of a model's requests, for every model kind: their ids (``OpenRequests``:
one per tenant) and its tenant limits (``max_in_flight``, ``max_queued``,
``tokens_per_minute``: per-tenant ledgers). The event loop mutates;
``snapshot`` may be read from any thread. Ledgers are never dropped (tenants come from
configuration). A request of n choices counts as n requests (in flight, waiting, running);
its prompt is charged once."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Generic, Iterator, TypeVar

from ..errors import DuplicateRequestId, InvalidRequest, TenantLimit
from ..tenancy import Tenant

WINDOW_S = 60.0
T = TypeVar("T")


class OpenRequests(Generic[T]):
    """A model's open requests by (tenant name, request id): what Cancel finds; an id is
    held once per tenant. Event loop only."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], T] = {}

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._open

    def values(self) -> Iterator[T]:
        return iter(list(self._open.values()))

    def get(self, tenant: str, request_id: str) -> T | None:
        return self._open.get((tenant, request_id))

    def hold(self, tenant: str, request_id: str, holder: T) -> None:
        """DuplicateRequestId if ``tenant`` already holds ``request_id``."""
        if (tenant, request_id) in self._open:
            raise DuplicateRequestId(f"request id {request_id!r} is already running",
                                     metadata={"request_id": request_id})
        self._open[(tenant, request_id)] = holder

    def release(self, tenant: str, request_id: str, holder: T) -> bool:
        """Drops the id if ``holder`` still holds it."""
        if self._open.get((tenant, request_id)) is not holder:
            return False
        del self._open[(tenant, request_id)]
        return True


@dataclass(frozen=True)
class TenantStats:
    tenant: str
    running: int
    waiting: int
    in_flight: int
    tokens_last_minute: int
    generated_tokens: int
    refused: int


class Ledger:
    def __init__(self, name: str):
        self.name = name
        self.in_flight = 0
        self.running = 0
        self.waiting = 0
        self.generated = 0
        self.refused = 0
        self._window: deque[tuple[float, int]] = deque()  # (when, tokens), oldest first
        self._windowed = 0

    def charge(self, tokens: int, now: float) -> None:
        if tokens > 0:
            self._window.append((now, tokens))
            self._windowed += tokens

    def used(self, now: float) -> int:
        while self._window and self._window[0][0] <= now - WINDOW_S:
            self._windowed -= self._window.popleft()[1]
        return self._windowed

    def frees_in(self, tokens: int, limit: int, now: float) -> float:
        """Seconds until ``tokens`` more fit under ``limit`` as the window slides."""
        over = self.used(now) + tokens - limit
        for when, charged in self._window:
            over -= charged
            if over <= 0:
                return max(when + WINDOW_S - now, 0.001)
        return WINDOW_S


class Tenants:
    def __init__(self, model: str, clock: Callable[[], float] = time.monotonic):
        self.model = model
        self._clock = clock
        self._ledgers: dict[str, Ledger] = {}
        self._lock = threading.Lock()

    def admit(self, tenant: Tenant, count: int = 1) -> None:
        """Counts a new request (``count`` choices) in flight, or raises TenantLimit."""
        with self._lock:
            for key, limit in (("max_in_flight", tenant.max_in_flight), ("max_queued", tenant.max_queued)):
                if limit and count > limit:  # never admitted, however long it waits
                    raise InvalidRequest("n", f"{count} choices exceed this tenant's {key} of {limit}")
            ledger = self._ledgers.setdefault(tenant.name, Ledger(tenant.name))
            now = self._clock()
            if tenant.max_in_flight and ledger.in_flight + count > tenant.max_in_flight:
                self._refuse(ledger, "max_in_flight", tenant.max_in_flight,
                             f"{ledger.in_flight} requests in flight" + (f" and asks for {count} choices"
                                                                         if count > 1 else ""), 1.0)
            queued = ledger.in_flight - ledger.running
            if tenant.max_queued and queued + count > tenant.max_queued:
                self._refuse(ledger, "max_queued", tenant.max_queued, f"{queued} requests waiting to start", 1.0)
            if tenant.tokens_per_minute and ledger.used(now) >= tenant.tokens_per_minute:
                self._refuse(ledger, "tokens_per_minute", tenant.tokens_per_minute,
                             f"{ledger.used(now)} tokens in the last minute",
                             ledger.frees_in(1, tenant.tokens_per_minute, now))
            ledger.in_flight += count

    def submit(self, tenant: Tenant, prompt_tokens: int, count: int = 1) -> None:
        """Charges the prompt, or raises TenantLimit."""
        with self._lock:
            self._charge(tenant, prompt_tokens, f"a {prompt_tokens}-token prompt")
            self._ledgers[tenant.name].waiting += count

    def charge(self, tenant: Tenant, tokens: int) -> None:
        """Charges ``tokens`` of input read after the request began (an embedding's), or
        raises TenantLimit if they would pass ``tokens_per_minute``."""
        with self._lock:
            self._charge(tenant, tokens, f"{tokens} more to read")

    def _charge(self, tenant: Tenant, tokens: int, what: str) -> None:
        ledger, limit, now = self._ledgers[tenant.name], tenant.tokens_per_minute, self._clock()
        if limit and ledger.used(now) + tokens > limit:
            wait = ledger.frees_in(tokens, limit, now) if tokens <= limit else WINDOW_S
            self._refuse(ledger, "tokens_per_minute", limit, f"{ledger.used(now)} tokens in the last minute and {what}",
                         wait)
        ledger.charge(tokens, now)

    def began(self, name: str) -> None:
        """A request admitted without a submitted prompt (an embedding's) holds its slot."""
        with self._lock:
            self._ledgers[name].running += 1

    def started(self, name: str, count: int = 1) -> None:
        with self._lock:
            ledger = self._ledgers[name]
            ledger.waiting -= count
            ledger.running += count

    def generated(self, name: str, tokens: int) -> None:
        with self._lock:
            ledger = self._ledgers[name]
            ledger.generated += tokens
            ledger.charge(tokens, self._clock())

    def closed(self, name: str, submitted: bool, started: bool, count: int = 1) -> None:
        with self._lock:
            ledger = self._ledgers[name]
            ledger.in_flight -= count
            if started:
                ledger.running -= count
            elif submitted:
                ledger.waiting -= count

    def snapshot(self) -> tuple[TenantStats, ...]:
        with self._lock:
            now = self._clock()
            return tuple(TenantStats(x.name, x.running, x.waiting, x.in_flight, x.used(now), x.generated, x.refused)
                         for x in self._ledgers.values())

    def _refuse(self, ledger: Ledger, limit: str, value: int, holds: str, retry_after_s: float) -> None:
        ledger.refused += 1
        who = repr(ledger.name) if ledger.name else "anonymous"
        raise TenantLimit(f"tenant {who} has {holds} on model {self.model!r}; its {limit} is {value}; retry later",
                          tenant=ledger.name, limit=limit, value=value, retry_after_s=retry_after_s)
