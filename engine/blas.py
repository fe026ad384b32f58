"""Which BLAS MLX's CPU backend uses. The Linux ``mlx[cpu]`` wheel links a reference
BLAS; a faster one can be preloaded globally before ``import mlx`` (see README)."""

from __future__ import annotations

import sys

_loaded: str | None = None


def active() -> str:
    if _loaded:
        return _loaded
    return "accelerate" if sys.platform == "darwin" else "reference"
