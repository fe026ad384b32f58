"""Linear layers of the base model that add each row's low-rank delta:
``y = base(x) + ((x @ A_cat) * mask) @ B_cat``.

Invariant: a targeted layer gets the ``Adapted`` mixin (``engine.layering``, rank ADAPTER);
weights, names and tree stay untouched, and the mixin leaves with its last adapter.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from ..layering import ADAPTER, install, uninstall
from .fit import LayerPart
from .routing import Layout, Routing


@dataclass(frozen=True)
class Member:
    key: str
    rank: int
    scale: float
    dora: bool  # its per-output gain is a row of ``LayerStack.gains``


class LayerStack:
    """The adapters loaded on one linear layer. Engine thread only."""

    def __init__(self, module: nn.Module, routing: Routing):
        self.module = module
        self.routing = routing
        self.members: list[Member] = []
        self.a_cat: mx.array | None = None
        self.b_cat: mx.array | None = None
        self.layout: Layout = ()
        self.dora_keys: tuple[str, ...] = ()
        self.gains: mx.array | None = None  # [1 + DoRA members, 1, out]; row 0 is ones
        self.bias_fix: mx.array | None = None  # (1 - gain) * bias, same rows

    @property
    def nbytes(self) -> int:
        arrays = (self.a_cat, self.b_cat, self.gains, self.bias_fix)
        return sum(a.nbytes for a in arrays if a is not None)

    def add(self, key: str, part: LayerPart) -> None:
        if not self.members:
            _install(self.module, self)
        self.members.append(Member(key, part.a.shape[1], part.scale, part.gain is not None))
        self.a_cat = part.a if self.a_cat is None else mx.concatenate([self.a_cat, part.a], axis=1)
        self.b_cat = part.b if self.b_cat is None else mx.concatenate([self.b_cat, part.b], axis=0)
        if part.gain is not None:
            gains = self.gains if self.gains is not None else mx.ones_like(part.gain)[None, None]
            self.gains = mx.concatenate([gains, part.gain[None, None]])
        self._relayout()

    def remove(self, key: str) -> None:
        at = next(i for i, m in enumerate(self.members) if m.key == key)
        start = sum(m.rank for m in self.members[:at])
        end = start + self.members[at].rank
        if self.members[at].dora:
            gains = self.gains
            assert gains is not None  # a DoRA member has its row
            row = 1 + sum(m.dora for m in self.members[:at])
            self.gains = mx.concatenate([gains[:row], gains[row + 1:]]) if len(gains) > 2 else None
        del self.members[at]
        if not self.members:
            _uninstall(self.module)
            self.a_cat = self.b_cat = None
        else:
            a_cat, b_cat = self._cats()
            self.a_cat = mx.concatenate([a_cat[:, :start], a_cat[:, end:]], axis=1)
            self.b_cat = mx.concatenate([b_cat[:start], b_cat[end:]], axis=0)
        self._relayout()

    def apply(self, x: mx.array, y: mx.array) -> mx.array:
        """``y`` (the base output for ``x``) plus each routed row's delta."""
        mask = self.routing.mask(self.layout, x.dtype)
        if mask is None:
            return y
        a_cat, b_cat = self._cats()
        y = mx.addmm(y, (x @ a_cat) * _per_row(mask, x), b_cat)
        if self.gains is not None and (rows := self.routing.index(self.dora_keys)) is not None:
            y = y * _per_row(self.gains[rows], x)
            if self.bias_fix is not None:
                y = y + _per_row(self.bias_fix[rows], x)
        return y

    def _cats(self) -> tuple[mx.array, mx.array]:
        """(A_cat, B_cat), set while the stack has members."""
        assert self.a_cat is not None and self.b_cat is not None
        return self.a_cat, self.b_cat

    def _relayout(self) -> None:
        self.layout = tuple((m.key, m.rank, m.scale) for m in self.members)
        self.dora_keys = tuple(m.key for m in self.members if m.dora)
        gains = self.gains
        self.bias_fix = (1 - gains) * self.module.bias if gains is not None and "bias" in self.module else None
        mx.eval([a for a in (self.a_cat, self.b_cat, self.gains, self.bias_fix) if a is not None])


def _per_row(values: mx.array, x: mx.array) -> mx.array:
    """``values`` [rows, 1, n] shaped to broadcast against ``x``'s rows."""
    rows = values.shape[0]
    if x.ndim == 3 and x.shape[0] == rows:
        return values
    if rows == 1:
        return values.reshape(-1)
    if x.shape[0] == rows:
        return values.reshape(rows, *([1] * (x.ndim - 2)), -1)
    raise RuntimeError(f"cannot route {rows} rows through a layer whose input has shape {tuple(x.shape)}")


class Adapted:
    RANK = ADAPTER

    def __call__(self, x, *args, **kwargs):
        return self._adapter_stack.apply(x, super().__call__(x, *args, **kwargs))


def _install(module: nn.Module, stack: LayerStack) -> None:
    module._adapter_stack = stack  # a plain attribute: not a parameter, not a child module
    install(module, Adapted)


def _uninstall(module: nn.Module) -> None:
    uninstall(module, Adapted)
    del module._adapter_stack
