"""The only messages that cross into an engine thread.

Invariants: a message is plain data, built on the asking thread and read only on the
engine thread; a ``Control`` carries its own handler, written beside the subsystem it
serves, so a new operation is one class in one module and the thread has no table of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Generic, Protocol, TypeVar

from ..events import Event

W = TypeVar("W")  # the work a Submit carries (a generation's CoreRequest): plain data
S = TypeVar("S", contravariant=True)  # the engine thread's scheduler, as a control reads it
R = TypeVar("R", covariant=True)  # a control's answer


Outbox = Callable[[Event], None]
"""Where a request's events leave the engine thread: the only way back (the frontend's
``Stream.sink``, which hands each event to the event loop)."""


@dataclass(frozen=True)
class Submit(Generic[W]):
    work: W


@dataclass(frozen=True)
class Cancel:
    """End this request (its engine-side key), whatever state it is in."""

    key: str


@dataclass(frozen=True)
class Shutdown:
    """End every request (CANCELLED) and the thread."""


class Control(ABC, Generic[S, R]):
    """An operation the engine thread runs between ticks; the asker's future gets its answer
    (or its exception). Subclasses are frozen dataclasses of the operation's arguments."""

    @abstractmethod
    def answer(self, scheduler: S) -> R:
        """Engine thread, between ticks: do the operation on ``scheduler``."""


T = TypeVar("T")


class Asks(Protocol):
    """A way to ask an engine thread (``EngineThread.ask``): a future of ``control``'s answer."""

    def __call__(self, control: Control[Any, T], /) -> Future[T]: ...
