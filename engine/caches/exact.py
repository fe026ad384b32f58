"""Cache state cut down to what it holds, and the bytes it really holds.

Invariant: after ``exact`` every array is evaluated and owns its buffer (views of a
larger parent are copied, nothing else is); held bytes are measured (``buffer_bytes``),
never derived from ``nbytes``.
"""

from __future__ import annotations

import resource
from typing import Any

import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from ..mlx_typed import flatten

_PAGE = resource.getpagesize()


def exact(caches: list[Any]) -> list[Any]:
    """``caches`` (changed in place and returned) with every array evaluated and owning its buffer."""
    for cache in caches:
        if type(cache) is KVCache and cache.keys is not None and cache.offset < cache.keys.shape[2]:
            cache.keys = cache.keys[..., : cache.offset, :]
            cache.values = cache.values[..., : cache.offset, :]
        elif isinstance(cache, QuantizedKVCache) and cache.keys is not None and cache.offset < cache.keys[0].shape[2]:
            cache.keys = tuple(x[..., : cache.offset, :] for x in cache.keys)
            cache.values = tuple(x[..., : cache.offset, :] for x in cache.values)
    mx.eval(arrays(caches))
    views = [cache.state for cache in caches]  # kept alive until copied: MLX may not donate their buffers
    for cache, state in zip(caches, views):
        cache.state = tree_map(_own, state)
    mx.eval(arrays(caches))
    return caches


def arrays(caches: list[Any]) -> list[mx.array]:
    return [leaf for _, leaf in flatten([c.state for c in caches]) if isinstance(leaf, mx.array)]


def buffer_bytes(caches: list[Any]) -> int:
    """Bytes of the distinct buffers behind the caches' arrays (a view counts its whole parent)."""
    held = arrays(caches)
    mx.eval(held)
    return mx.get_array_buffer_size(held)


def _own(leaf: Any) -> Any:
    if isinstance(leaf, mx.array) and _is_view(leaf):
        return mx.array(leaf)  # a copy of its own bytes
    return leaf


def _is_view(a: mx.array) -> bool:
    """A buffer larger than the allocator would reuse for ``a`` belongs to a parent."""
    held = mx.get_array_buffer_size(a)
    return held > a.nbytes and held >= min(2 * a.nbytes, a.nbytes + 2 * _PAGE)
