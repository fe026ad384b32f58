"""What a generation engine reports about its load (GetLoad, metrics): the engine
thread's snapshot with the facade's own figures and each tenant's share. Any thread may
read these, except ``stats`` (the event loop)."""

from __future__ import annotations

import asyncio
import dataclasses
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...serving.admission import TenantStats
from ..core.scheduling.scheduler import SchedulerStats, Stats
from ..grammar.constraint import GrammarStats

if TYPE_CHECKING:
    from ...serving.admission import Tenants
    from ...serving.thread import EngineThread
    from ..core.request import CoreRequest
    from ..core.scheduling.scheduler import Scheduler
    from ..loaded import Loaded
    from .streams import Streams


@dataclass(frozen=True)
class EngineStats(SchedulerStats):
    tracked: int  # requests the facade knows, in any state
    in_flight: int  # submitted and not finished
    tenants: tuple[TenantStats, ...] = ()


class LoadReports:
    """A mixin of ``GenerationEngine``: it reads the engine's thread, streams, tenants and what its load gave."""

    _thread: EngineThread[Loaded, CoreRequest, Scheduler]
    _streams: Streams
    _tenants: Tenants
    _served: Loaded | None

    def scheduler_stats(self) -> Future[SchedulerStats]:
        """The engine thread's snapshot, as a future any thread may wait on."""
        return self._thread.ask(Stats())

    async def stats(self) -> EngineStats:
        snapshot = await asyncio.wrap_future(self.scheduler_stats())
        fields = {f.name: getattr(snapshot, f.name) for f in dataclasses.fields(snapshot)}  # not deep: keeps DiskStats
        return EngineStats(**fields, tracked=len(self._streams),
                           in_flight=self._streams.in_flight, tenants=self.tenant_stats())

    def tenant_stats(self) -> tuple[TenantStats, ...]:
        """Each tenant's share of this model; any thread may call it."""
        return self._tenants.snapshot()

    @property
    def grammar_stats(self) -> GrammarStats | None:
        """None before the model loads."""
        return self._served.grammars.stats if self._served is not None else None

    @property
    def active(self) -> int:
        """Started and not finished, as the event loop last heard."""
        return self._streams.running

    @property
    def queued(self) -> int:
        """Submitted and not started, as the event loop last heard."""
        return self._streams.in_flight - self._streams.running
