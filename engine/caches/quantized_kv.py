"""KV caches held in MLX's affine quantization (``--kv-bits``): mlx-lm's
``QuantizedKVCache`` for one row, and its batch form for continuous batching.

Invariants: keys and values are each (codes uint32, scales, biases) along the head
dimension in groups of ``group_size``; a batch cache behaves as mlx-lm's
``BatchKVCache`` (left padding, ``_idx``, trim, right-padding rolls), component by
component; a row extracted from a batch, or merged into one, holds the same codes.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache, dynamic_roll, make_prompt_cache

KV_BITS = (4, 8)
STEP = 256


def _kernels():
    """The CPU kernels' extension when they are in use (None: MLX's own ops)."""
    from .. import kernels

    return kernels.ext() if kernels.enabled() else None


def group_for(head_dim: int) -> int:
    """The largest of 64 and 32 dividing ``head_dim`` (0: none does)."""
    return next((g for g in (64, 32) if head_dim % g == 0), 0)


def _group_or_refuse(head_dim: int) -> int:
    group = group_for(head_dim)
    if not group:
        raise ValueError(f"the head size {head_dim} is not a multiple of 32 (MLX quantizes groups of 32, 64 or 128)")
    return group


def make_caches(model: nn.Module, bits: int = 0) -> list[Any]:
    """``make_prompt_cache(model)`` with every plain KV layer quantized to ``bits`` (0: as is)."""
    caches = make_prompt_cache(model)
    if not bits:
        return caches
    return [QuantizedRowCache(bits=bits) if type(c) is KVCache else c for c in caches]


def check_kv_bits(model: nn.Module, bits: int, name: str) -> None:
    """Refuses ``bits`` this model's KV cannot be held in (UnsupportedModel naming why)."""
    from ..errors import UnsupportedModel

    if bits not in KV_BITS:
        raise UnsupportedModel(f"--kv-bits must be one of {', '.join(map(str, KV_BITS))} (or 0), not {bits}")
    caches = make_caches(model, bits)
    if not any(isinstance(c, QuantizedKVCache) for c in caches):
        return  # no plain KV layer: nothing to quantize
    try:
        mx.eval(model(mx.array([[0]], dtype=mx.int32), cache=caches))
    except Exception as exc:  # noqa: BLE001 - reported as the model's, with the cause
        raise UnsupportedModel(f"model {name!r} cannot hold its KV in {bits} bits: {exc}") from exc


def batch_cache(left_padding: Sequence[int], like: Any) -> BatchKVCache:
    """An empty batch cache for rows of ``like``'s kind."""
    if isinstance(like, QuantizedKVCache):
        return BatchQuantizedKVCache(left_padding, like.bits)
    return BatchKVCache(left_padding)


def _width(dim: int, bits: int) -> int:
    return dim * bits // 32


def _empty(shape: tuple[int, ...], dim: int, bits: int, group: int, dtype: mx.Dtype) -> tuple[mx.array, ...]:
    return (mx.zeros((*shape, _width(dim, bits)), dtype=mx.uint32), mx.zeros((*shape, dim // group), dtype=dtype),
            mx.zeros((*shape, dim // group), dtype=dtype))


class QuantizedRowCache(QuantizedKVCache):
    """One row's quantized KV; the group size follows the head size at the first update."""

    def __init__(self, group_size: int = 0, bits: int = 8):
        super().__init__(group_size=group_size or 64, bits=bits)
        self._group_fixed = bool(group_size)

    def update_and_fetch(self, keys, values):
        if self.keys is None and not self._group_fixed:
            self.group_size = _group_or_refuse(keys.shape[-1])
            self._group_fixed = True
        return super().update_and_fetch(keys, values)

    @property
    def state(self):
        return self.keys, self.values, self.offset, self.group_size, self.bits

    @state.setter
    def state(self, v):
        self.keys, self.values, self.offset, self.group_size, self.bits = v
        self._group_fixed = True

    @classmethod
    def merge(cls, caches: Sequence["QuantizedRowCache"]) -> "BatchQuantizedKVCache":
        return BatchQuantizedKVCache.merge(caches)


class BatchQuantizedKVCache(BatchKVCache):
    """mlx-lm's ``BatchKVCache`` with each of keys and values a (codes, scales, biases) tuple."""

    def __init__(self, left_padding: Sequence[int], bits: int = 8, group_size: int = 0):
        super().__init__(list(left_padding))
        self.bits = bits
        self.group_size = group_size or 64
        self._group_fixed = bool(group_size)

    def update_and_fetch(self, keys, values):
        B, H, n, dk = keys.shape
        dv = values.shape[-1]
        if self.keys is None and not self._group_fixed:
            self.group_size = _group_or_refuse(dk)
            self._group_fixed = True
        prev = self._idx
        if self.keys is None or prev + n > self.keys[0].shape[2]:
            shape = (B, H, (STEP + n - 1) // STEP * STEP)
            new_k = _empty(shape, dk, self.bits, self.group_size, keys.dtype)
            new_v = _empty(shape, dv, self.bits, self.group_size, values.dtype)
            if self.keys is None:
                self.keys, self.values = new_k, new_v
            else:
                if prev % STEP:
                    self.keys = tuple(x[..., :prev, :] for x in self.keys)
                    self.values = tuple(x[..., :prev, :] for x in self.values)
                self.keys = tuple(mx.concatenate([x, y], axis=2) for x, y in zip(self.keys, new_k))
                self.values = tuple(mx.concatenate([x, y], axis=2) for x, y in zip(self.values, new_v))
        ext = _kernels()
        if ext is not None and keys.dtype == values.dtype == mx.float32:  # one primitive, in place
            out = ext.kv_quantize_write([*self.keys, *self.values], keys, values, prev, self.group_size, self.bits)
            self.keys, self.values = tuple(out[:3]), tuple(out[3:])
        else:
            qk = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
            qv = mx.quantize(values, group_size=self.group_size, bits=self.bits)
            for mine, new in ((self.keys, qk), (self.values, qv)):
                for x, y in zip(mine, new):
                    x[..., prev : prev + n, :] = y
        self.offset = self.offset + n
        self._idx += n
        return self.keys_and_values()

    def keys_and_values(self):
        return (tuple(x[..., : self._idx, :] for x in self.keys),
                tuple(x[..., : self._idx, :] for x in self.values))

    def finalize(self):
        if self._right_padding is not None:
            padding = self._right_padding
            self.keys = tuple(dynamic_roll(x, padding[:, None], axis=2) for x in self.keys)
            self.values = tuple(dynamic_roll(x, padding[:, None], axis=2) for x in self.values)
            self.offset = self.offset - padding
            self.left_padding += padding
            self._right_padding = None

    @property
    def state(self):
        return self.keys, self.values, self.offset, self.left_padding, self._idx, self.group_size, self.bits

    @state.setter
    def state(self, v):
        self.keys, self.values, self.offset, self.left_padding, self._idx, self.group_size, self.bits = v
        self._right_padding = None
        self._group_fixed = True

    def filter(self, batch_indices):
        if self.keys is not None:
            self.keys = tuple(x[batch_indices] for x in self.keys)
            self.values = tuple(x[batch_indices] for x in self.values)
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        shift = min(self.left_padding.tolist())
        if shift > 0:
            if self.keys is not None:
                self.keys = tuple(x[..., shift:, :] for x in self.keys)
                self.values = tuple(x[..., shift:, :] for x in self.values)
            self._idx -= shift
            self.left_padding -= shift

    def extend(self, other: "BatchQuantizedKVCache"):
        if self.keys is None and other.keys is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        some = self if self.keys is not None else other
        self.group_size, self._group_fixed = some.group_size, True
        width = max(self._idx, other._idx)
        size = max(c.keys[0].shape[2] for c in (self, other) if c.keys is not None)

        def aligned(c: "BatchQuantizedKVCache"):
            parts = []
            for mine, like in ((c.keys, some.keys), (c.values, some.values)):
                if mine is None:
                    rows = c.offset.shape[0]
                    mine = tuple(mx.zeros((rows, x.shape[1], 0, x.shape[3]), dtype=x.dtype) for x in like)
                left = width - c._idx
                right = size - mine[0].shape[2] - left
                out = []
                for x in mine:
                    if right < 0:
                        x = x[..., :right, :]
                    if left or right > 0:
                        x = mx.pad(x, [(0, 0), (0, 0), (left, max(right, 0)), (0, 0)])
                    out.append(x)
                parts.append(tuple(out))
            return parts[0], parts[1], c.offset, c.left_padding + (width - c._idx)

        (k1, v1, o1, l1), (k2, v2, o2, l2) = aligned(self), aligned(other)
        self.keys = tuple(mx.concatenate([a, b]) for a, b in zip(k1, k2))
        self.values = tuple(mx.concatenate([a, b]) for a, b in zip(v1, v2))
        self.offset = mx.concatenate([o1, o2])
        self.left_padding = mx.concatenate([l1, l2])
        self._idx = width

    def extract(self, idx: int) -> QuantizedRowCache:
        cache = QuantizedRowCache(self.group_size, self.bits)
        mx.eval(self.left_padding)
        padding = self.left_padding.tolist()[idx]
        cache.keys = tuple(mx.contiguous(x[idx : idx + 1, :, padding : self._idx]) for x in self.keys)
        cache.values = tuple(mx.contiguous(x[idx : idx + 1, :, padding : self._idx]) for x in self.values)
        cache.offset = cache.keys[0].shape[2]
        return cache

    @classmethod
    def merge(cls, caches: Sequence[QuantizedKVCache]) -> "BatchQuantizedKVCache":
        lengths = [c.offset if c.keys is not None else 0 for c in caches]
        width = max(lengths)
        bits = caches[0].bits
        if width == 0:
            return cls([0] * len(caches), bits)
        like = next(c for c in caches if c.keys is not None)
        out = cls([width - n for n in lengths], bits, like.group_size)
        B = len(caches)
        out.keys = tuple(mx.zeros((B, x.shape[1], width, x.shape[3]), dtype=x.dtype) for x in like.keys)
        out.values = tuple(mx.zeros((B, x.shape[1], width, x.shape[3]), dtype=x.dtype) for x in like.values)
        for i, (n, c) in enumerate(zip(lengths, caches)):
            if c.keys is None:
                continue
            for mine, theirs in ((out.keys, c.keys), (out.values, c.values)):
                for x, y in zip(mine, theirs):
                    x[i : i + 1, :, width - n :] = y[..., :n, :]
        out.offset += width
        out._idx = width
        return out

    def empty(self):
        return self.keys is None

    @property
    def nbytes(self):
        if self.keys is None:
            return 0
        return sum(x.nbytes for x in (*self.keys, *self.values))
