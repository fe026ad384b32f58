"""The engines' watchdog: every model's liveness, polled on the event loop.

A model is broken when its engine thread died, or stayed busy on one iteration
longer than the stall timeout (``engine.liveness``). Its callers are ended the
moment it is found (streams and calls fail UNAVAILABLE, reason ENGINE_DEAD; new
requests are refused the same way) - on the event loop, so a stuck thread cannot
hold them. ``serve`` then sets health NOT_SERVING, drains briefly and exits with
``EXIT_ENGINE_BROKEN`` so that an orchestrator restarts the process.
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
    """Returns, once a model is found broken, each broken model's fault (its callers
    ended already). ``stall_timeout_s`` 0: only a thread's death counts."""
    while not (broken := models.broken(stall_timeout_s)):
        await asyncio.sleep(poll_s)
    for name, fault in broken.items():
        log.critical("model %r is broken (%s): the server stops serving and exits", name, fault)
    return broken
