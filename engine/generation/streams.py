"""The event loop's view of requests: one ``Stream`` per request, and their registry.

A stream is opened when ``generate`` is called, carries the request's events from
the engine thread (``sink`` -> ``call_soon_threadsafe`` -> an ``asyncio.Queue``)
and closes when its Finished event arrives (or when it ends before submission),
running its ``closers`` (e.g. the release of the adapter it used).
The registry knows the ids in use (Cancel, duplicates) and counts what the
engine holds, from events alone: ``in_flight`` (submitted, not finished) and
``running`` (started, not finished). Event loop only. A stream ends once: events
after its Finished (from a thread given up for broken, see ``fail_submitted``) are
ignored.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from ..errors import DuplicateRequestId
from ..events import Event, FinishReason, Finished, Started, Timings, Usage


class Stream:
    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop,
                 on_event: Callable[["Stream", Event], None]):
        self.request_id = request_id
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.submitted = False
        self.started = False
        self.finished = False
        self.cancel_requested = False
        self.closers: list[Callable[[], None]] = []  # run once when the stream closes
        self._loop = loop
        self._on_event = on_event

    def sink(self, event: Event) -> None:
        """Called on the engine thread: hands ``event`` to the event loop."""
        try:
            self._loop.call_soon_threadsafe(self._deliver, event)
        except RuntimeError:  # the loop is closed: nobody is listening any more
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
    def __init__(self) -> None:
        self._open: dict[str, Stream] = {}
        self.in_flight = 0
        self.running = 0

    def __len__(self) -> int:
        return len(self._open)

    def get(self, request_id: str) -> Stream | None:
        return self._open.get(request_id)

    def open(self, request_id: str) -> Stream:
        if request_id in self._open:
            raise DuplicateRequestId(f"request id {request_id!r} is already running",
                                     metadata={"request_id": request_id})
        stream = self._open[request_id] = Stream(request_id, asyncio.get_running_loop(), self._on_event)
        return stream

    def submitted(self, stream: Stream) -> None:
        stream.submitted = True
        self.in_flight += 1

    def abandon(self, stream: Stream) -> None:
        """Closes a stream that was never submitted."""
        if not stream.submitted:
            self._open.pop(stream.request_id, None)
            stream.close()

    def fail_submitted(self, error: str) -> None:
        """Ends every submitted stream with ERROR here, on the event loop, without the
        engine thread (which is dead or stuck)."""
        for stream in [s for s in self._open.values() if s.submitted and not s.finished]:
            stream._deliver(Finished(FinishReason.ERROR, Usage(0, 0, 0), Timings(0.0, 0.0, 0.0, 0.0), error=error))

    def _on_event(self, stream: Stream, event: Event) -> None:
        if isinstance(event, Started) and not stream.started:
            stream.started = True
            self.running += 1
        elif isinstance(event, Finished) and not stream.finished:
            stream.finished = True
            self.in_flight -= 1
            self.running -= stream.started
            self._open.pop(stream.request_id, None)
            stream.close()
