"""Admission of a generation request: a FIFO slot, then its memory.

The slot comes from the ``AdmissionPool`` (capacity = active rows, bounded queue:
a full queue is refused at once). The memory comes from the ``MemoryGate``: a
request whose context can never fit is refused at once with the plan's figures;
one that only does not fit beside the running requests waits, holding its place,
until a running request releases memory. Lives on the event loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .admission import AdmissionPool, Lease
from ..errors import DoesNotFit

if TYPE_CHECKING:
    from ..memory.budget import MemoryGate, Reservation


class Ticket:
    """A slot and a memory reservation; ``release`` frees both, once."""

    def __init__(self, admitter: "Admitter", lease: Lease, reservation: "Reservation | None"):
        self._admitter, self._lease, self._reservation = admitter, lease, reservation
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._reservation is not None:
            self._reservation.release()
        self._lease.release()
        self._admitter._memory_released()


class Admitter:
    def __init__(self, pool: AdmissionPool, gate: "MemoryGate | None" = None):
        self.pool = pool
        self.gate = gate
        self._freed = asyncio.Event()

    @property
    def max_context(self) -> int | None:
        """The longest context a request running alone may have (None: unbounded)."""
        return self.gate.max_context if self.gate is not None else None

    @property
    def reserved(self) -> int:
        return self.gate.active if self.gate is not None else 0

    def check(self, tokens: int) -> None:
        """Refuses at once a request whose context can never fit in memory."""
        if self.gate is None or self.gate.would_ever_fit(tokens):
            return
        g = self.gate
        raise DoesNotFit(
            f"a context of {tokens} tokens can never fit in memory: at most {g.max_context} tokens "
            f"fit beside {g.facts.weights_bytes} bytes of weights in {g.usable_bytes} usable bytes",
            metadata={"context_tokens": str(tokens), "max_safe_context": str(g.max_context),
                      "weights_bytes": str(g.facts.weights_bytes), "usable_bytes": str(g.usable_bytes),
                      "reserve_bytes": str(g.reserve_bytes)})

    async def admit(self, tokens: int) -> Ticket:
        """Waits for a slot (FIFO) and then for memory; cancellation releases both."""
        lease = await self.pool.acquire()
        try:
            reservation = None
            if self.gate is not None:
                while (reservation := self.gate.try_reserve(tokens)) is None:
                    self._freed.clear()
                    await self._freed.wait()
        except BaseException:
            lease.release()
            raise
        return Ticket(self, lease, reservation)

    def _memory_released(self) -> None:
        self._freed.set()
