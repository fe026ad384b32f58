"""SIMD CPU kernels for MLX (``csrc/``, built by ``python -m engine.kernels.build``).

Invariant: applied on the CPU backend only, and only when built for the running mlx;
otherwise (or with ``MLX_GRPC_KERNELS=off``) mlx's own ops run and ``status()`` says why.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from types import ModuleType

import mlx.core as mx

__all__ = ["ENV_VAR", "PACKED_BATCH_SIZE", "PACKED_BATCH_TOKENS", "KernelStatus", "status", "enabled", "ext",
           "announce", "apply_to_decoder", "apply_to_encoder"]

log = logging.getLogger("engine.kernels")

ENV_VAR = "MLX_GRPC_KERNELS"
# Packed encoder batches compute no padding; the size only bounds how long first results wait,
# the tokens keep each forward's temporaries small enough to be reused from the heap.
PACKED_BATCH_SIZE = 128
PACKED_BATCH_TOKENS = 2048
_OFF = {"off", "0", "no", "false", "none"}
_ISA = {16: "avx512", 8: "avx2", 4: "sse/neon"}


@dataclass(frozen=True)
class KernelStatus:
    available: bool
    detail: str  # what runs ("avx512, 2 threads") or why nothing does

    def describe(self) -> str:
        return f"kernels {self.detail}" if self.available else f"kernels off: {self.detail}"


_module: ModuleType | None = None
_status: KernelStatus | None = None
_announced = False


def turned_off() -> bool:
    return os.environ.get(ENV_VAR, "auto").strip().lower() in _OFF


def status() -> KernelStatus:
    """Whether the kernels can run here (module loaded once; the env var read every call)."""
    global _status, _module
    if turned_off():
        return KernelStatus(False, f"{ENV_VAR}={os.environ.get(ENV_VAR)}")
    if _status is None:
        _module, _status = _load()
    return _status


def enabled() -> bool:
    """The kernels are built, loadable, not turned off, and MLX computes on the CPU."""
    return not turned_off() and status().available and mx.default_device().type == mx.DeviceType.cpu


def ext() -> ModuleType:
    """The loaded extension (also while turned off: models that took it keep running it)."""
    if _module is None:
        status()
    if _module is None:
        raise RuntimeError(status().describe())
    return _module


def announce() -> None:
    """Logs once whether the kernels run."""
    global _announced
    if _announced or mx.default_device().type != mx.DeviceType.cpu:
        return
    _announced = True
    s = status()
    if s.available and not turned_off():
        log.info("CPU kernels: %s", s.detail)
    elif turned_off():
        log.info("CPU kernels turned off (%s); MLX's own ops run", s.detail)
    else:
        log.warning("CPU kernels unavailable (%s); MLX's own ops run, several times slower", s.detail)


def apply_to_decoder(model, name: str = "") -> dict[str, int]:
    """Puts the kernels into a loaded mlx-lm model if enabled; returns counts replaced, by kind."""
    announce()
    if not enabled():
        return {}
    from .lm_models import apply  # needs the module loaded

    return _report(name, apply(model))


def apply_to_encoder(encoder, name: str = "") -> dict[str, int]:
    """The same for the BERT encoder."""
    announce()
    if not enabled():
        return {}
    from .encoder import apply

    return _report(name, apply(encoder))


def apply_to_tower(vlm, name: str = "") -> dict[str, int]:
    """The same for an mlx-vlm model's vision tower and projector."""
    announce()
    if not enabled():
        return {}
    from .vision import apply

    return _report(f"{name} vision tower" if name else "vision tower", apply(vlm))


def _report(name: str, counts: dict[str, int]) -> dict[str, int]:
    log.info("CPU kernels in %s: %s", name or "model",
             ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "none applicable")
    return counts


def _load() -> tuple[ModuleType | None, KernelStatus]:
    from .build import stale_reason  # not at import: `python -m engine.kernels.build`

    stale = stale_reason()
    if stale is not None:
        return None, KernelStatus(False, f"{stale}; run `python -m engine.kernels.build`")
    try:
        _ext = importlib.import_module(f"{__name__}._ext")  # optional, built in place (no type information)
    except ImportError as exc:
        return None, KernelStatus(False, f"the module does not load ({exc}); "
                                         "run `python -m engine.kernels.build --force`")
    running: str = mx.__version__  # type: ignore[attr-defined]  # mlx.core's stub omits __version__
    if _ext.mlx_version != running.split(".dev")[0]:
        return None, KernelStatus(False, f"built against mlx {_ext.mlx_version}, running "
                                         f"{running}; rebuild")
    problem = _self_test(_ext)
    if problem:
        return None, KernelStatus(False, problem)
    isa = _ISA.get(_ext.simd_width, f"{_ext.simd_width}-wide")
    widths = "/".join(str(b) for b in _ext.int_matvec())
    dots = f", {widths}-bit matvec by integer dots" if widths else ""
    return _ext, KernelStatus(True, f"{isa}{dots}, {_ext.max_threads()} threads")


def _self_test(module: ModuleType) -> str:
    """A tiny call through the module: catches a binding ABI differing from mlx's."""

    try:
        x = mx.array([[-2.0, -0.5, 0.0, 0.5, 2.0]])
        got = module.silu_gate(x, x, stream=mx.cpu)
        want = x * mx.sigmoid(x) * x
        if not mx.allclose(got, want, rtol=1e-5, atol=1e-6).item():
            return "self-test gave wrong values"
    except (TypeError, RuntimeError, ValueError) as exc:
        return f"self-test failed ({exc}); the nanobind used to build may not match mlx's"
    return ""
