"""Facts about the compute device the engine runs on."""

from __future__ import annotations

import mlx.core as mx

from . import blas


def on_cpu() -> bool:
    return mx.default_device().type == mx.DeviceType.cpu


def backend_name() -> str:
    """"mlx-cpu" or "mlx-metal" (or "mlx-cuda")."""
    if on_cpu():
        return "mlx-cpu"
    return "mlx-metal" if mx.metal.is_available() else "mlx-gpu"


def runtime_dtype(requested: str) -> mx.Dtype | None:
    """The floating dtype weights run in: ``auto`` is float32 on CPU, else None (keep the checkpoint's)."""
    announce_blas()
    if requested == "auto":
        return mx.float32 if on_cpu() else None
    try:
        return getattr(mx, requested)
    except AttributeError:
        raise ValueError(f"unknown dtype {requested!r}; use auto, float32, float16 or bfloat16") from None


def blas_name() -> str:
    """The BLAS behind MLX's CPU matmuls and whether the CPU kernels run, in one line."""
    if not on_cpu():
        return "none (gpu)"
    announce_blas()
    from .. import kernels  # kernels imports mlx after the BLAS preload

    return f"{blas.active()}; {kernels.status().describe()}"


def announce_blas() -> None:
    """Logs the BLAS behind MLX's CPU matmuls once."""
    if on_cpu():
        blas.announce()


def end_thread() -> None:
    """Waits for this thread's queued work and destroys the streams it created.

    MLX keeps each thread's streams in thread-local state that it tears down only as the
    thread exits, which can race the interpreter's own exit: every thread that ran MLX
    calls this as its last step (MLX's documented cleanup).
    """
    try:
        mx.synchronize()
    except RuntimeError:  # a failure of the thread's own work, reported to that work already
        pass
    mx.clear_streams()
