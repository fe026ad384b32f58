"""Prefetch: a prompt's longest stored prefix brought into the memory tier before its
request runs. The disk read happens off the engine thread; the engine thread only looks
(``PeekPrefix``) and installs (``InstallPrefix``)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Callable, Sequence

from ..caches.disk import DiskTier
from ..caches.tier import Prefetched, Tier
from .scheduling.worker import InstallPrefix, PeekPrefix, Query


async def prefetch(ask: Callable[[Query], Future], disk: DiskTier | None, ids: Sequence[int], namespace: str,
                   session: str, disk_namespace: str | None) -> Prefetched:
    """``namespace``: the memory tier's; ``disk_namespace``: the disk tier's (None: not kept there)."""
    ids = tuple(ids)
    covered = await asyncio.wrap_future(ask(PeekPrefix(ids, namespace, session)))
    tier = Tier.MEMORY if covered else Tier.NONE
    found = disk.find(disk_namespace, ids) if disk is not None and disk_namespace is not None else None
    if found is not None and found[1] > covered:
        entry = await asyncio.to_thread(disk.read, found[0])
        if entry is not None:
            await asyncio.wrap_future(ask(InstallPrefix(entry, namespace, session)))
            covered, tier = found[1], Tier.DISK
    return Prefetched(len(ids), covered, tier)
