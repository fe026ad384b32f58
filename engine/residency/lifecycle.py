"""What a model set needs to load models at run time: how to build an engine, where models
may come from, the catalog, the memory limit and the models a worker contract holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .catalog import Catalog, ModelSpec


@dataclass(frozen=True)
class Lifecycle:
    factory: Callable[[ModelSpec], Any] | None = None  # None: nothing loads at run time
    root: str | None = None
    catalog: Catalog = field(default_factory=Catalog)
    memory_limit: int | None = None  # None: the memory available when the set is built
    max_keep_alive_s: float = 1800.0
    held: frozenset[str] = frozenset()  # served by a worker contract: never unloaded
