"""KV caches held in MLX's affine quantization (``--kv-bits``): mlx-lm's
``QuantizedKVCache`` for one row, and its batch form for continuous batching.

Invariants: a row's keys and values are each (codes uint32, scales, biases) along the
head dimension in groups of ``group_size``; a batch cache packs each into one uint32
buffer and behaves as mlx-lm's ``BatchKVCache`` (left padding, ``_idx``, trim,
right-padding rolls); a row extracted from a batch, or merged into one, holds the same
codes.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache, make_prompt_cache

from ..mlx_typed import int_list

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
    except Exception as exc:  # reported as the model's, with the cause
        raise UnsupportedModel(f"model {name!r} cannot hold its KV in {bits} bits: {exc}") from exc


def batch_cache(left_padding: Sequence[int], like: Any) -> BatchKVCache:
    """An empty batch cache for rows of ``like``'s kind."""
    if isinstance(like, QuantizedKVCache):
        return BatchQuantizedKVCache(left_padding, like.bits)
    return BatchKVCache(list(left_padding))


def _width(dim: int, bits: int) -> int:
    return dim * bits // 32


class QuantizedRowCache(QuantizedKVCache):
    """One row's quantized KV; the group size follows the head size at the first update."""

    # (codes, scales, biases) once written (mlx-lm's __init__ sets them to None, all it declares)
    keys: tuple[mx.array, mx.array, mx.array] | None  # type: ignore[assignment]  # mlx-lm infers None
    values: tuple[mx.array, mx.array, mx.array] | None  # type: ignore[assignment]  # mlx-lm infers None

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


def pack(parts: tuple[mx.array, mx.array, mx.array]) -> mx.array:
    """(codes, scales, biases) as one uint32 array: each row's codes, then its scales and biases' bits."""
    codes, scales, biases = parts
    return mx.concatenate([codes, scales.view(mx.uint32), biases.view(mx.uint32)], axis=-1)


def unpack(x: mx.array, dim: int, bits: int, group: int) -> tuple[mx.array, mx.array, mx.array]:
    """``pack``'s inverse, as views of ``x``."""
    w, g = _width(dim, bits), dim // group
    return x[..., :w], x[..., w : w + g].view(mx.float32), x[..., w + g :].view(mx.float32)


def _contiguous(parts: tuple[mx.array, mx.array, mx.array]) -> tuple[mx.array, mx.array, mx.array]:
    codes, scales, biases = parts
    return mx.contiguous(codes), mx.contiguous(scales), mx.contiguous(biases)


class BatchQuantizedKVCache(BatchKVCache):
    """mlx-lm's ``BatchKVCache`` whose keys and values are each one packed uint32 buffer
    (``pack``), so every batch operation it inherits works on them as they are, and a
    decode step writes each in place with one primitive. Float32 activations only."""

    # packed, once written (mlx-lm's __init__ sets them to None, all it declares)
    keys: mx.array | None  # type: ignore[assignment]  # mlx-lm infers None
    values: mx.array | None  # type: ignore[assignment]  # mlx-lm infers None

    def __init__(self, left_padding: Sequence[int], bits: int = 8, group_size: int = 0, dims=(0, 0)):
        super().__init__(list(left_padding))
        self.bits = bits
        self.group_size = group_size or 64
        self._group_fixed = bool(group_size)
        self.dims = dims  # head sizes of keys and values (known at the first update or merge)

    def update_and_fetch(self, keys, values):
        if keys.dtype != mx.float32 or values.dtype != mx.float32:
            raise ValueError("--kv-bits needs float32 activations (the server's default dtype on a CPU)")
        B, H, n, dk = keys.shape
        dv = values.shape[-1]
        if self.keys is None and not self._group_fixed:
            self.group_size = _group_or_refuse(dk)
            self._group_fixed = True
        self.dims = (dk, dv)
        prev = self._idx
        if self.keys is None or prev + n > self.keys.shape[2]:
            steps = (STEP + n - 1) // STEP * STEP
            new_k = mx.zeros((B, H, steps, self._packed(dk)), dtype=mx.uint32)
            new_v = mx.zeros((B, H, steps, self._packed(dv)), dtype=mx.uint32)
            if self.keys is None:
                self.keys, self.values = new_k, new_v
            else:
                if prev % STEP:
                    self.keys, self.values = self.keys[..., :prev, :], self.values[..., :prev, :]
                self.keys = mx.concatenate([self.keys, new_k], axis=2)
                self.values = mx.concatenate([self.values, new_v], axis=2)
        ext = _kernels()
        if ext is not None:  # one primitive each, in place
            self.keys = ext.kv_pack_write(self.keys, keys, prev, self.group_size, self.bits)
            self.values = ext.kv_pack_write(self.values, values, prev, self.group_size, self.bits)
        else:
            self.keys[..., prev : prev + n, :] = pack(mx.quantize(keys, group_size=self.group_size, bits=self.bits))
            self.values[..., prev : prev + n, :] = pack(mx.quantize(values, group_size=self.group_size,
                                                                   bits=self.bits))
        self.offset = self.offset + n
        self._idx += n
        return self.keys_and_values()

    def _packed(self, dim: int) -> int:
        return _width(dim, self.bits) + 2 * (dim // self.group_size)

    def parts(self) -> tuple[tuple, tuple, int]:
        """(keys, values) as (codes, scales, biases) views of the whole buffers, and how many
        positions hold data: what the attention kernel reads."""
        assert self.keys is not None and self.values is not None  # read after the first update
        dk, dv = self.dims
        return (unpack(self.keys, dk, self.bits, self.group_size), unpack(self.values, dv, self.bits, self.group_size),
                self._idx)

    def keys_and_values(self):
        dk, dv = self.dims
        return (unpack(self.keys[..., : self._idx, :], dk, self.bits, self.group_size),
                unpack(self.values[..., : self._idx, :], dv, self.bits, self.group_size))

    def extract(self, idx: int) -> QuantizedRowCache:
        cache = QuantizedRowCache(self.group_size, self.bits)
        mx.eval(self.left_padding)
        padding = int_list(self.left_padding)[idx]
        assert self.keys is not None and self.values is not None  # a row is extracted once written
        dk, dv = self.dims
        row_k = self.keys[idx : idx + 1, :, padding : self._idx]
        row_v = self.values[idx : idx + 1, :, padding : self._idx]
        cache.keys = _contiguous(unpack(row_k, dk, self.bits, self.group_size))
        cache.values = _contiguous(unpack(row_v, dv, self.bits, self.group_size))
        cache.offset = self._idx - padding
        return cache

    @classmethod
    def merge(cls, caches: Sequence[QuantizedKVCache]) -> "BatchQuantizedKVCache":
        lengths = [c.offset if c.keys is not None else 0 for c in caches]
        width = max(lengths)
        bits = caches[0].bits
        if width == 0:
            return cls([0] * len(caches), bits)
        like = next(c for c in caches if c.keys is not None)
        assert like.keys is not None and like.values is not None  # written together
        dims = (like.keys[0].shape[-1] * 32 // bits, like.values[0].shape[-1] * 32 // bits)
        out = cls([width - n for n in lengths], bits, like.group_size, dims)
        B, H = len(caches), like.keys[0].shape[1]
        out.keys = mx.zeros((B, H, width, out._packed(dims[0])), dtype=mx.uint32)
        out.values = mx.zeros((B, H, width, out._packed(dims[1])), dtype=mx.uint32)
        for i, (n, c) in enumerate(zip(lengths, caches)):
            if n and c.keys is not None and c.values is not None:  # n > 0: written
                out.keys[i : i + 1, :, width - n :] = pack(tuple(x[..., :n, :] for x in c.keys))
                out.values[i : i + 1, :, width - n :] = pack(tuple(x[..., :n, :] for x in c.values))
        out.offset += width
        out._idx = width
        return out

    def extend(self, other: "BatchQuantizedKVCache"):
        if self.keys is None and other.keys is not None:
            self.group_size, self.dims, self._group_fixed = other.group_size, other.dims, True
        super().extend(other)
