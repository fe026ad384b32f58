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
