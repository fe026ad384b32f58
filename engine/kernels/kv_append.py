"""A fused attention's keys and values written straight into mlx-lm's float32 ``KVCache``
and ``BatchKVCache`` buffers by the qkv_rope primitive itself (``qkv_rope_append``), and
attention reading those buffers up to their length: a step schedules no SliceUpdate,
Slice or offset add for its cache.

Invariant: afterwards the cache holds exactly what mlx-lm's ``update_and_fetch`` would
leave (keys, values, offset, ``_idx``), so every other cache operation works on it
unchanged. A step the buffers have no room for (the first, or one past their capacity)
runs ``update_and_fetch`` itself, growth by ``step`` included. Other cache types
(quantized, rotating, ...) are not touched here."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, KVCache

_PLAIN = (KVCache, BatchKVCache)


def plain(cache) -> bool:
    """Exactly mlx-lm's KVCache or BatchKVCache, holding float32 buffers."""
    return (type(cache) in _PLAIN and cache.keys is not None
            and cache.keys.dtype == mx.float32 and cache.values.dtype == mx.float32)


def position(cache) -> int:
    """The buffer row the next token goes to (also how many rows hold data)."""
    return cache._idx if type(cache) is BatchKVCache else cache.offset


def has_room(cache, n: int) -> bool:
    """Whether ``n`` more tokens fit the buffers as they are (no growth)."""
    return plain(cache) and position(cache) + n <= cache.keys.shape[2]


def advance(cache, keys: mx.array, values: mx.array, offsets: mx.array, after: mx.array, n: int) -> None:
    """The cache's state after writing ``n`` tokens: ``keys``/``values`` the written buffers,
    ``after`` = ``offsets`` + n (``offsets`` being what RoPE read)."""
    cache.keys, cache.values = keys, values
    if type(cache) is BatchKVCache:
        cache.offset = after if offsets is cache.offset else cache.offset + n
        cache._idx += n
    else:
        cache.offset += n
