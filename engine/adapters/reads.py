"""Adapter files read on their own daemon threads (never the event loop's or an engine's).

Invariant: a hung read blocks only its thread and its caller, keeps its slot until it
returns, and never keeps the process from exiting; reads in flight are bounded.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, TypeVar

from ..errors import AdapterCapacity
from ..hardware.device import end_thread

T = TypeVar("T")


class Reads:
    def __init__(self, limit: int = 4):
        self.limit = limit
        self._busy = 0
        self._lock = threading.Lock()

    @property
    def busy(self) -> int:
        return self._busy

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on a new daemon thread; its result or exception."""
        with self._lock:
            if self._busy >= self.limit:
                raise AdapterCapacity(f"{self.limit} adapter loads are reading their files already; retry later",
                                      metadata={"reads": str(self.limit)})
            self._busy += 1
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def work() -> None:
            try:
                outcome: tuple[bool, Any] = (True, fn())  # (True, the result) or (False, the error)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting call
                outcome = (False, exc)
            finally:
                with self._lock:
                    self._busy -= 1
                end_thread()
            try:
                loop.call_soon_threadsafe(_settle, future, *outcome)
            except RuntimeError:  # the loop has closed: nobody waits any more
                pass

        threading.Thread(target=work, name="adapter-read", daemon=True).start()
        return await future


def _settle(future: asyncio.Future, ok: bool, value) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
