"""The engines' watchdog: every model's liveness, polled on the event loop.

Invariant: a broken model's callers are ended on the event loop, so a stuck thread cannot
hold them; ``serve`` then exits with ``EXIT_ENGINE_BROKEN``.
"""

from __future__ import annotations

import asyncio
import logging

from engine.models import ModelSet

log = logging.getLogger("service.watchdog")
EXIT_ENGINE_BROKEN = 3  # serve's exit status when a model's engine broke
POLL_S = 0.25
BROKEN_GRACE_S = 2.0  # the drain's grace once a model is broken (its own callers are ended already)


async def watch(models: ModelSet, stall_timeout_s: float, poll_s: float = POLL_S) -> dict[str, str]:
    """Returns each broken model's fault once one is found (``stall_timeout_s`` 0: deaths only)."""
    while not (broken := models.broken(stall_timeout_s)):
        await asyncio.sleep(poll_s)
    for name, fault in broken.items():
        log.critical("model %r is broken (%s): the server stops serving and exits", name, fault)
    return broken
