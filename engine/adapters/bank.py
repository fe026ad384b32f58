"""The loaded adapters of one model, owned by its engine thread (not thread-safe).

Invariants: each load gets a unique key (``name#serial``) that routes rows and namespaces the
prefix cache; base weights are never modified or copied; installs are all-or-nothing.
"""

from __future__ import annotations

import itertools
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import mlx.core as mx
import mlx.nn as nn

from ..errors import AdapterCapacity, DoesNotFit
from ..memory.budget import MemoryBudget
from .fit import LayerPart, fit
from .info import AdapterInfo
from .layers import LayerStack
from .routing import Routing
from .source import AdapterFiles, read_adapter


@dataclass(frozen=True)
class Loaded:
    info: AdapterInfo
    paths: tuple[str, ...]


class AdapterBank:
    def __init__(self, model: nn.Module, model_name: str):
        self._model = model
        self._model_name = model_name
        self.routing = Routing()
        self._stacks: dict[str, LayerStack] = {}
        self._loaded: dict[str, Loaded] = {}
        self._serial = itertools.count(1)

    @property
    def nbytes(self) -> int:
        return sum(stack.nbytes for stack in self._stacks.values())

    @property
    def keys(self) -> list[str]:
        return list(self._loaded)

    def digest(self, key: str) -> str:
        """The loaded adapter's content digest ("" for an unknown key or one read without one)."""
        loaded = self._loaded.get(key)
        return loaded.info.digest if loaded is not None else ""

    def routed(self, seqs: Sequence) -> AbstractContextManager:
        """The forwards built inside run ``seqs``' rows (in order) with their adapters."""
        return self.routing.routed([seq.adapter for seq in seqs])

    def load(self, name: str, adapter: AdapterFiles | str | Path, *, evict: Sequence[str] = (),
             budget: MemoryBudget | None = None, field: str = "path") -> AdapterInfo:
        """Checks and installs an adapter, then unloads the ``evict`` keys (already left out of the memory check)."""
        source = adapter.source() if isinstance(adapter, AdapterFiles) else read_adapter(adapter, field)
        parts = fit(self._model, source, self._model_name)
        mx.eval([a for p in parts for a in (p.a, p.b, p.gain) if a is not None])
        adding = sum(p.nbytes for p in parts)
        freeing = sum(self._loaded[k].info.nbytes for k in evict)
        if budget is not None:
            self._check_room(budget, self.nbytes - freeing + adding, adding)
        info = AdapterInfo(name, f"{name}#{next(self._serial)}", str(source.path), source.fine_tune_type,
                           source.rank, source.scale, sum(p.targets for p in parts), adding, digest=source.digest)
        self._install(info, parts)  # first: if it fails, nothing was evicted
        for key in evict:
            self.unload(key)
        if budget is not None:
            budget.set_resident(self.nbytes)
        return info

    def unload(self, key: str, budget: MemoryBudget | None = None) -> None:
        """Takes an adapter out of its layers; no row may be using it."""
        loaded = self._loaded.pop(key)
        for path in loaded.paths:
            stack = self._stacks[path]
            stack.remove(key)
            if not stack.members:
                del self._stacks[path]
        if budget is not None:
            budget.set_resident(self.nbytes)

    def _install(self, info: AdapterInfo, parts: list[LayerPart]) -> None:
        """Adds the parts to their layers' stacks; all of them or (on failure) none."""
        self._loaded[info.key] = Loaded(info, ())
        try:
            for part in parts:
                stack = self._stacks.get(part.path)
                if stack is None:
                    stack = self._stacks[part.path] = LayerStack(part.module, self.routing)
                stack.add(info.key, part)
                self._loaded[info.key] = Loaded(info, (*self._loaded[info.key].paths, part.path))
        except BaseException:
            self.unload(info.key)
            raise

    def _check_room(self, budget: MemoryBudget, total: int, adding: int) -> None:
        now, idle = budget.resident_room()
        figures = {"adapter_bytes": str(adding), "resident_bytes": str(total), "room_bytes": str(idle)}
        if total > idle:
            raise DoesNotFit(f"adapters of {total} bytes can never fit beside the weights of model "
                             f"{self._model_name!r} ({idle} bytes of room)", metadata=figures)
        if total > now:
            raise AdapterCapacity(f"adapters of {total} bytes do not fit beside the requests running on model "
                                  f"{self._model_name!r} now ({now} bytes of room); retry later",
                                  metadata=figures)
