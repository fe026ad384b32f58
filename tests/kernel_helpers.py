"""Shared by the kernel tests: the built extension, or a failure saying why not.

The kernels are part of the install (scripts/setup.sh builds them), so their tests
fail when they are missing; ``MLX_GRPC_KERNELS=off`` skips them deliberately.
"""

from __future__ import annotations

import pytest


def kernels_ext():
    from engine import kernels

    if kernels.turned_off():
        pytest.skip(f"{kernels.ENV_VAR}=off")
    state = kernels.status()
    if not state.available:
        pytest.fail(f"CPU kernels unavailable: {state.detail}")
    return kernels.ext()


def product_inputs(K, k: int, n: int, lead: tuple[int, ...], bias: bool, residual: bool, prologue: str,
                   eps: float):
    """Inputs of a linear/quantized product with its extras, and the rows it must
    multiply: (x, bias, residual, norm weight, rows). ``prologue`` is "none",
    "rms_norm" (rows = mx.fast.rms_norm(x)) or "silu_gate" (x holds 2k values: gate, up)."""
    import mlx.core as mx

    x = mx.random.normal((*lead, 2 * k if prologue == "silu_gate" else k))
    b = mx.random.normal((n,)) if bias else None
    r = mx.random.normal((*lead, n)) if residual else None
    norm = mx.random.normal((k,)) if prologue == "rms_norm" else None
    rows = x
    if prologue == "rms_norm":
        rows = mx.fast.rms_norm(x, norm, eps)
    elif prologue == "silu_gate":
        rows = K.silu_gate_halves(x)
    return x, b, r, norm, rows


def limb_bound(x, deq):
    """sum_k |w[n, k]| * (largest |x| in k's block of 32) for each row of x and each n: what
    the integer-dot path's limbs may move an output by, in units of 2^-21 (int_matvec.h)."""
    import mlx.core as mx
    import numpy as np

    a = np.abs(np.array(x, dtype=np.float64))
    blocks = a.reshape(*a.shape[:-1], -1, 32).max(axis=-1, keepdims=True)
    block_max = np.broadcast_to(blocks, (*a.shape[:-1], a.shape[-1] // 32, 32)).reshape(a.shape)
    return block_max @ np.abs(np.array(deq, dtype=np.float64)).T
