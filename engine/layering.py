"""Per-instance behaviour on a loaded model's modules: the one way the engine patches a model.

A behaviour is a mixin class whose ``__call__`` runs around ``super().__call__`` and
whose ``RANK`` places it: ``install(module, mixin)`` makes the instance's class a
subclass of its original class with every installed mixin in rank order (highest
outermost), whatever order they arrive in; ``uninstall`` removes one and keeps the
rest. Parameters, names and other instances of the class are untouched.
"""

from __future__ import annotations

import mlx.nn as nn

KERNEL = 0  # a faster computation of the module's own output (innermost)
ADAPTER = 1  # adds each row's low-rank delta to the output
CHECKPOINT = 2  # evaluates the output and may stop the forward
TAP = 3  # records the output for a draft head that reads it (outermost)

_classes: dict[tuple[type, tuple[type, ...]], type] = {}


def layers_of(module: nn.Module) -> tuple[type, tuple[type, ...]]:
    """The module's original class and its installed mixins, outermost first."""
    cls = type(module)
    return cls.__dict__.get("_layering", (cls, ()))


def install(module: nn.Module, mixin: type) -> None:
    base, mixins = layers_of(module)
    if mixin not in mixins:
        _set(module, base, (*mixins, mixin))


def uninstall(module: nn.Module, mixin: type) -> None:
    base, mixins = layers_of(module)
    _set(module, base, tuple(m for m in mixins if m is not mixin))


def only_kernels(module: nn.Module) -> bool:
    """Whether nothing but kernels changes what the module computes."""
    return all(m.RANK == KERNEL for m in layers_of(module)[1])  # type: ignore[attr-defined]  # mixins declare RANK


def _set(module: nn.Module, base: type, mixins: tuple[type, ...]) -> None:
    mixins = tuple(sorted(mixins, key=lambda m: -m.RANK))  # type: ignore[attr-defined]  # mixins declare RANK
    if not mixins:
        module.__class__ = base
        return
    key = (base, mixins)
    if key not in _classes:
        _classes[key] = type(base.__name__, (*mixins, base), {
            "__module__": base.__module__, "__qualname__": base.__qualname__, "_layering": key})
    module.__class__ = _classes[key]
