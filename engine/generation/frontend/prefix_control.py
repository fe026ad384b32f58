"""The prefix cache's facade on the event loop: its disk tier (opened when the model
loads), prefetch, sessions and flushes. A prefetch reads the disk off the engine thread;
the engine thread only looks (``PeekPrefix``) and installs (``InstallPrefix``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from ...adapters.control import Adapters
from ...caches.disk import DiskTier
from ...caches.disk_key import load_key
from ...caches.fingerprint import NoWeights, model_fingerprint
from ...caches.tier import Prefetched, Tier
from ...errors import InvalidRequest, Unsupported
from ...loading.model import LoadedModel, cache_root
from ...requests import GenerationRequest
from ...serving.protocol import Asks
from ...validation import Limits, check_ids
from ..config import SchedulerConfig
from ..core.scheduling.reuse import (
    CloseSession,
    FlushPrefixCache,
    InstallPrefix,
    PeekPrefix,
    disk_namespace,
    namespace_of,
    session_of,
)
from .prompts import EncodedPrompt

log = logging.getLogger("engine.generation.prefix")


class PrefixControl:
    def __init__(self, ask: Asks, adapters: Adapters, config: SchedulerConfig, limits: Limits):
        self._ask = ask
        self._adapters = adapters
        self._config = config
        self._limits = limits
        self.disk: DiskTier | None = None

    def open_disk(self, loaded: LoadedModel) -> DiskTier | None:
        """The disk tier of ``--prefix-cache-dir`` for this model (engine thread, at load)."""
        c = self._config
        if c.prefix_cache_dir and c.prefix_cache_bytes > 0:
            state = cache_root()
            key = load_key(c.prefix_cache_key_file, state, c.prefix_cache_dir)
            try:
                fingerprint = model_fingerprint(loaded.artifact, loaded.config, loaded.dtype, loaded.kernels,
                                                c.kv_bits, numerics=loaded.numerics, state_dir=state)
            except NoWeights as exc:
                log.warning("model %s: no disk tier for its prefix cache: %s", loaded.name, exc)
                return None
            self.disk = DiskTier(c.prefix_cache_dir, c.prefix_cache_disk_bytes, fingerprint, key,
                                 trimmable=loaded.traits.can_roll_back)
        return self.disk

    async def close(self) -> None:
        """Lets the writes queued at shutdown land."""
        if self.disk is not None:
            await asyncio.to_thread(self.disk.close)

    async def flush(self) -> int:
        """Empties the prefix cache (its disk tier too); returns the entries dropped."""
        return await asyncio.wrap_future(self._ask(FlushPrefixCache()))

    async def prefetch(self, m: LoadedModel, request: GenerationRequest,
                       prepare: Callable[[GenerationRequest], Awaitable[tuple[EncodedPrompt, object]]]
                       ) -> Prefetched:
        """Brings the longest stored prefix of ``request``'s prompt into memory; ``prepare``
        reads the prompt as Generate does (off the loop, in the preparation pool)."""
        if self._config.prefix_cache_bytes <= 0:
            raise Unsupported(f"model {m.name!r} is served without a prefix cache (--prefix-cache-bytes 0)")
        closers: list = []
        try:
            adapter = self._adapters.acquire(request.adapter, closers)
            prompt, _ = await prepare(request)
            ns = namespace_of(m.name, request.tenant.namespace, adapter)
            return await self._fetch(tuple(prompt.ids), ns, session_of(request.tenant.name, request.session_id),
                                     disk_namespace(ns, self._adapters.digest_of))
        finally:
            for close in closers:
                close()

    async def _fetch(self, ids: tuple[int, ...], namespace: str, session: str,
                     disk_namespace: str | None) -> Prefetched:
        """``namespace``: the memory tier's; ``disk_namespace``: the disk tier's (None: not kept there)."""
        covered = await asyncio.wrap_future(self._ask(PeekPrefix(ids, namespace, session)))
        tier = Tier.MEMORY if covered else Tier.NONE
        disk = self.disk
        found = disk.find(disk_namespace, ids) if disk is not None and disk_namespace is not None else None
        if found is not None and disk is not None and found[1] > covered:
            entry = await asyncio.wrap_future(disk.read_async(found[0]))
            if entry is not None:
                await asyncio.wrap_future(self._ask(InstallPrefix(entry, namespace, session)))
                covered, tier = found[1], Tier.DISK
        return Prefetched(len(ids), covered, tier)

    async def close_session(self, session_id: str, tenant: str) -> int:
        """Ends a session's prefix-cache affinity; returns how many entries it held."""
        if not session_id:
            raise InvalidRequest("session_id", "is required")
        check_ids(self._limits, session_id=session_id)
        return await asyncio.wrap_future(self._ask(CloseSession(session_of(tenant, session_id))))
