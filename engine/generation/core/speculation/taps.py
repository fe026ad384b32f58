"""Hidden states a draft head reads, recorded from the target's own forward: the
outputs of chosen decoder layers and of the final norm. A tap records only inside
``capture()``, on the thread that opened it; elsewhere it passes the output through."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import mlx.core as mx
import mlx.nn as nn

from ....layering import TAP, install

FINAL = "final"  # the final norm's output: what the output layer reads

_SINK: ContextVar[dict[object, mx.array] | None] = ContextVar("hidden_taps", default=None)


class Tapped:
    RANK = TAP
    _tap_key: object

    def __call__(self, *args, **kwargs):
        out = super().__call__(*args, **kwargs)
        sink = _SINK.get()
        if sink is not None:
            sink[self._tap_key] = out
        return out


def tappable(model: nn.Module) -> bool:
    """Whether the model's decoder layers and final norm can be tapped."""
    inner = getattr(model, "model", None)
    return (isinstance(inner, nn.Module) and isinstance(getattr(inner, "layers", None), list)
            and isinstance(getattr(inner, "norm", None), nn.Module))


class Taps:
    """Taps on ``layers`` (indices into the decoder's layers) and, with ``final``, the final norm."""

    def __init__(self, model: nn.Module, layers: tuple[int, ...] = (), final: bool = False):
        if not tappable(model):
            raise ValueError("this model's hidden layers cannot be tapped")
        blocks = model.model.layers
        for i in layers:
            if not 0 <= i < len(blocks):
                raise ValueError(f"layer {i} is not one of the model's {len(blocks)} layers")
        self.keys: tuple[object, ...] = (*layers, *((FINAL,) if final else ()))
        for key in self.keys:
            module = model.model.norm if key == FINAL else blocks[key]
            install(module, Tapped)
            object.__setattr__(module, "_tap_key", key)

    @contextmanager
    def capture(self) -> Iterator[dict[object, mx.array]]:
        """The outputs of one forward by key, filled as it runs."""
        sink: dict[object, mx.array] = {}
        token = _SINK.set(sink)
        try:
            yield sink
        finally:
            _SINK.reset(token)
