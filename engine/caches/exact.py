"""Cache state cut down to what it holds, and the bytes it really holds.

mlx-lm counts a cache's memory as the ``nbytes`` of its arrays. That is what the
process holds only when every array is evaluated and owns a buffer of its own
size, and state handed to the prefix cache often is not:

* a row extracted from a running batch (``BatchKVCache.extract``) is a lazy copy of
  a slice: until evaluated it keeps the whole batch's keys and values alive, every
  row and every free position, while counting one row;
* a slice that MLX evaluates as a view (a row of a recurrent state, a prefix of a
  buffer) keeps its parent's whole buffer;
* a sequence's own ``KVCache`` grows in steps of 256 positions: a 20-token prompt
  holds a 256-position buffer.

``exact`` cuts plain KV caches to their ``offset``, evaluates everything and copies
each array whose buffer is larger than MLX's allocator would ever hand out for it
(a view of a larger parent). An array that already owns its buffer is kept as it
is: nothing is copied that would not shrink memory. The allocator may still have
handed an array a freed buffer somewhat larger than it (up to two pages, or twice
a small array), so what is held is measured, not derived: ``buffer_bytes``.
"""

from __future__ import annotations

import resource
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten, tree_map
from mlx_lm.models.cache import KVCache

_PAGE = resource.getpagesize()


def exact(caches: list[Any]) -> list[Any]:
    """``caches`` (changed in place and returned) with every array evaluated and
    owning its buffer."""
    for cache in caches:
        if type(cache) is KVCache and cache.keys is not None and cache.offset < cache.keys.shape[2]:
            cache.keys = cache.keys[..., : cache.offset, :]
            cache.values = cache.values[..., : cache.offset, :]
    mx.eval(arrays(caches))
    views = [cache.state for cache in caches]  # kept alive until copied: MLX may not donate their buffers
    for cache, state in zip(caches, views):
        cache.state = tree_map(_own, state)
    mx.eval(arrays(caches))
    return caches


def arrays(caches: list[Any]) -> list[mx.array]:
    """Every array of the caches' states."""
    return [leaf for _, leaf in tree_flatten([c.state for c in caches]) if isinstance(leaf, mx.array)]


def buffer_bytes(caches: list[Any]) -> int:
    """Bytes of the distinct buffers behind the caches' arrays at the allocator's size:
    what the process holds for them (a view counts its whole parent)."""
    held = arrays(caches)
    mx.eval(held)
    return mx.get_array_buffer_size(held)


def _own(leaf: Any) -> Any:
    if isinstance(leaf, mx.array) and _is_view(leaf):
        return mx.array(leaf)  # a copy of its own bytes
    return leaf


def _is_view(a: mx.array) -> bool:
    """A buffer larger than the allocator hands out for ``a``: it reuses a freed buffer
    only below min(2 x size, size + 2 pages), so a larger one belongs to a parent."""
    held = mx.get_array_buffer_size(a)
    return held > a.nbytes and held >= min(2 * a.nbytes, a.nbytes + 2 * _PAGE)
