"""Typed views of mlx calls whose generated (nanobind) stubs are looser than what the calls return
here: the type checker sees the precise type, the call itself is mlx's, unchanged."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

if TYPE_CHECKING:
    from mlx_lm.tokenizer_utils import TokenizerWrapper


def flatten(tree: Any) -> list[tuple[str, Any]]:
    """``tree_flatten(tree)``: (path, leaf) pairs (its stub also allows the dict of a ``destination``)."""
    return cast(list[tuple[str, Any]], tree_flatten(tree))


def load_arrays(path: str) -> dict[str, mx.array]:
    """``mx.load`` of a .safetensors or .npz file: its arrays by name (the stub allows one array, or metadata)."""
    return cast(dict[str, mx.array], mx.load(path))


def load_lm(path: str) -> tuple[nn.Module, TokenizerWrapper]:
    """``mlx_lm.load(path)``: (model, tokenizer) (its annotation also allows the config, which
    it returns only when asked)."""
    import mlx_lm  # not at import: most users of this module never load a model

    return cast("tuple[nn.Module, TokenizerWrapper]", mlx_lm.load(path))


# ``array.tolist()`` is typed as a recursive union of scalars and lists; these name the
# shape the caller already knows (the array's ndim and dtype), and read it the same way.

def int_list(a: mx.array) -> list[int]:
    """``a.tolist()`` of a 1-d integer array."""
    return cast(list[int], a.tolist())


def float_list(a: mx.array) -> list[float]:
    """``a.tolist()`` of a 1-d floating-point array."""
    return cast(list[float], a.tolist())


def int_rows(a: mx.array) -> list[list[int]]:
    """``a.tolist()`` of a 2-d integer array."""
    return cast(list[list[int]], a.tolist())


def float_rows(a: mx.array) -> list[list[float]]:
    """``a.tolist()`` of a 2-d floating-point array."""
    return cast(list[list[float]], a.tolist())
