"""ggml's CPU backend as the kernels' source of llama.cpp's numerics: its shared library is
built with a small C bridge by ``python -m engine.kernels.ggml_build`` and opened on first
use, never at import.

Invariant: ``matmul`` is one ggml ``mul_mat`` on ggml's own threads: what llama.cpp's CPU
backend computes for the same tensors (x's rows quantized to the weight type's
``vec_dot_type``, integer dot products, ggml's choice of kernels).
"""

from __future__ import annotations

import functools

import mlx.core as mx

from ..errors import UnsupportedModel
from . import ext, status
from .ggml_build import built

__all__ = ["GgmlUnavailable", "GgmlWeights", "open_backend", "matmul", "row_bytes", "vec_dot_type"]


class GgmlUnavailable(UnsupportedModel):
    """ggml's CPU backend cannot run here (not built, or the kernels are off)."""


@functools.lru_cache(maxsize=1)
def open_backend() -> None:
    """Opens the library once; raises GgmlUnavailable saying why it cannot."""
    if not status().available:
        raise GgmlUnavailable(f"llama numerics need the CPU kernels: {status().describe()}")
    path = built()
    if path is None:
        raise GgmlUnavailable("llama numerics need ggml's CPU backend: run `python -m engine.kernels.ggml_build`")
    try:
        ext().ggml_open(str(path))
    except RuntimeError as exc:
        raise GgmlUnavailable(str(exc)) from exc


def vec_dot_type(ggml_type: int) -> int:
    open_backend()
    return ext().ggml_vec_dot_type(ggml_type)


def row_bytes(ggml_type: int, columns: int) -> int:
    open_backend()
    return ext().ggml_row_bytes(ggml_type, columns)


class GgmlWeights:
    """A weight's GGUF blocks as ggml's CPU backend multiplies them: repacked into ggml's own
    buffer where llama.cpp would place that type and shape there (``outside_bytes`` then
    counts them; MLX holds nothing), else the blocks as an MLX array."""

    def __init__(self, blocks: mx.array, ggml_type: int):
        open_backend()
        self.ggml_type = ggml_type
        self.held = ext().ggml_hold(blocks, ggml_type)
        self.blocks = None if self.held is not None else blocks
        self.outside_bytes = self.held.bytes if self.held is not None else 0

    def __call__(self, x: mx.array) -> mx.array:
        if self.held is not None:
            return ext().ggml_matmul_held(x.astype(mx.float32), self.held)
        assert self.blocks is not None  # kept whenever nothing is held
        return matmul(x.astype(mx.float32), self.blocks, self.ggml_type)


def matmul(x: mx.array, blocks: mx.array, ggml_type: int) -> mx.array:
    """x [..., K] float32 @ W.T for W held as GGUF blocks [N, row_bytes(ggml_type, K)] (uint8)."""
    open_backend()
    return ext().ggml_matmul(x, blocks, ggml_type)
