"""Retrying calls the server refused for now: RESOURCE_EXHAUSTED (admission queue
full) or UNAVAILABLE (model loading, server draining) carrying a google.rpc
RetryInfo, after exactly the delay the server asked for.

A call is retried only before its first response arrived (the server refuses
before it sends anything), never past the call's deadline, and with the same
request id. ``max_attempts`` counts the first attempt: 1 turns retrying off.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Optional

import grpc

from ._common import ErrorDetails, error_details

#: Status codes worth retrying when the server adds RetryInfo.
RETRYABLE = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE})

#: Called before each retry with the refusal's details and the delay in seconds.
OnRetry = Callable[[ErrorDetails, float], Any]


class Attempts:
    """The attempts and the deadline of one logical call."""

    def __init__(self, max_attempts: int, timeout: Optional[float], on_retry: Optional[OnRetry] = None):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.left = max_attempts
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.on_retry = on_retry

    def timeout(self) -> Optional[float]:
        """The time left for the next attempt (``None``: no deadline)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def delay_after(self, err: grpc.RpcError) -> Optional[float]:
        """Seconds to wait before trying again after ``err``; ``None`` when ``err`` is final."""
        self.left -= 1
        if self.left < 1 or not hasattr(err, "code") or err.code() not in RETRYABLE:
            return None
        details = error_details(err)
        delay = details.retry_delay
        if delay is None or (self.deadline is not None and time.monotonic() + delay >= self.deadline):
            return None
        if self.on_retry is not None:
            self.on_retry(details, delay)
        return delay


def call(fn: Callable[[Optional[float]], Any], attempts: Attempts) -> Any:
    """``fn(timeout)`` (a unary call), retried as ``attempts`` allows."""
    while True:
        try:
            return fn(attempts.timeout())
        except grpc.RpcError as err:
            delay = attempts.delay_after(err)
            if delay is None:
                raise
            time.sleep(delay)


async def acall(fn: Callable[[Optional[float]], Any], attempts: Attempts) -> Any:
    """``await fn(timeout)``, retried as ``attempts`` allows (asyncio)."""
    import asyncio  # noqa: PLC0415

    while True:
        try:
            return await fn(attempts.timeout())
        except grpc.RpcError as err:
            delay = attempts.delay_after(err)
            if delay is None:
                raise
            await asyncio.sleep(delay)


def stream(start: Callable[[Optional[float]], Any], attempts: Attempts) -> Iterator[Any]:
    """The messages of ``start(timeout)`` (a server-streaming call), retried as ``attempts``
    allows before the first message arrived. Closing the iterator early cancels the call."""
    received = False
    while True:
        call = start(attempts.timeout())
        try:
            for message in call:
                received = True
                yield message
            return
        except grpc.RpcError as err:
            delay = None if received else attempts.delay_after(err)
            if delay is None:
                raise
        finally:
            call.cancel()  # nothing when the call has ended
        time.sleep(delay)


async def astream(start: Callable[[Optional[float]], Any], attempts: Attempts) -> AsyncIterator[Any]:
    """:func:`stream` for grpc.aio."""
    import asyncio  # noqa: PLC0415

    received = False
    while True:
        call = start(attempts.timeout())
        try:
            async for message in call:
                received = True
                yield message
            return
        except grpc.RpcError as err:
            delay = None if received else attempts.delay_after(err)
            if delay is None:
                raise
        finally:
            call.cancel()
        await asyncio.sleep(delay)
