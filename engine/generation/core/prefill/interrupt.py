"""Stopping a prefill forward between layers when its request is cancelled.

A prompt chunk of a few hundred tokens takes seconds on a CPU; run as one lazy graph,
it would keep a cancelled request's slot and memory that long. While a prefill chunk
runs, each decoder layer's output is evaluated as soon as it is built and the engine
thread is asked whether a Cancel for that request is waiting; if one is, the forward
stops with ``Interrupted`` and the request ends, its half-written caches dropped. A layer
is queued before the one ahead of it is waited for, so the CPU never idles between them.
Outside prefill the layers run exactly as mlx-lm wrote them (lazy, nothing added).

Each decoder layer gets the ``Checkpointed`` mixin (``engine.layering``, rank
CHECKPOINT, outside kernels and adapters); the module tree and parameter names are
untouched. Several ``LayerCheckpoints`` of one model each see every layer.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import Callable, Iterator

import mlx.core as mx
import mlx.nn as nn

from ....layering import CHECKPOINT, install
from ....loading.traits import decoder_blocks

_arming = threading.Lock()  # engines of several models arm from their own threads


class Interrupted(Exception):
    """A checkpointed forward stopped between two layers."""


class LayerCheckpoints:
    def __init__(self, model: nn.Module):
        self._check: Callable[[], bool] | None = None
        self._queued: mx.array | None = None  # the last layer output queued, not yet waited for
        self.layers_run = 0  # layers evaluated while armed (for tests and profiles)
        for layer in decoder_blocks(model):
            if not hasattr(layer, "_checkpoints"):
                layer._checkpoints = weakref.WeakSet()  # a plain attribute, not a child module
            layer._checkpoints.add(self)
            install(layer, Checkpointed)

    @contextmanager
    def armed(self, check: Callable[[], bool]) -> Iterator[None]:
        """Within the block, every layer's output is evaluated and ``check()`` asked;
        True raises ``Interrupted`` out of the forward."""
        self._check = check
        with _arming:
            Checkpointed.armed += 1
        try:
            yield
        finally:
            self._check = self._queued = None
            with _arming:
                Checkpointed.armed -= 1

    def after_layer(self, output) -> None:
        if self._check is None:
            return
        mx.async_eval(output)
        if self._queued is not None:
            mx.eval(self._queued)  # the layer ahead ends while this one waits its turn
        self._queued = output
        self.layers_run += 1
        if self._check():
            raise Interrupted()


class Checkpointed:
    RANK = CHECKPOINT
    armed = 0  # LayerCheckpoints armed now, in the whole process (decode steps find none)

    def __call__(self, *args, **kwargs):
        output = super().__call__(*args, **kwargs)
        if Checkpointed.armed:
            for checkpoints in list(self._checkpoints):
                checkpoints.after_layer(output)
        return output
