"""Embedding vectors as one little-endian byte string of one element type, after the
request's dimensions and normalization: float32, float16, int8 with a scale per vector
(value ~ int8 x scale, scale = largest magnitude / 127) or ubinary (a bit per value, 1
above 0, the first value in the most significant bit)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence

import numpy as np


class EmbeddingType(enum.Enum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    INT8 = "int8"
    UBINARY = "ubinary"


@dataclass(frozen=True)
class Packed:
    data: bytes
    scales: tuple[float, ...] = ()  # INT8 only


def pack(vectors: Sequence[np.ndarray], kind: EmbeddingType) -> Packed:
    """``vectors`` (float32, all of one length) one after another as ``kind``."""
    block = np.stack([np.asarray(v, dtype=np.float32) for v in vectors]) if vectors else np.zeros((0, 0), np.float32)
    if kind is EmbeddingType.FLOAT32:
        return Packed(block.astype("<f4").tobytes())
    if kind is EmbeddingType.FLOAT16:
        return Packed(block.astype("<f2").tobytes())
    if kind is EmbeddingType.UBINARY:
        return Packed(np.packbits(block > 0, axis=-1).tobytes())
    largest = np.abs(block).max(axis=-1, keepdims=True) if block.size else np.zeros((len(block), 1), np.float32)
    scales = np.where(largest > 0, largest / 127.0, 1.0).astype(np.float32)
    values = np.clip(np.rint(block / scales), -127, 127).astype(np.int8)
    return Packed(values.tobytes(), tuple(float(s) for s in scales[:, 0]))


def unpack(data: bytes, count: int, dimensions: int, kind: EmbeddingType,
           scales: Sequence[float] = ()) -> np.ndarray:
    """The inverse as float32 [count, dimensions] (ubinary: 0/1 values)."""
    if kind is EmbeddingType.FLOAT32:
        return np.frombuffer(data, "<f4").reshape(count, dimensions).copy()
    if kind is EmbeddingType.FLOAT16:
        return np.frombuffer(data, "<f2").reshape(count, dimensions).astype(np.float32)
    if kind is EmbeddingType.UBINARY:
        bits = np.unpackbits(np.frombuffer(data, np.uint8).reshape(count, -1), axis=-1, count=dimensions)
        return bits.astype(np.float32)
    values = np.frombuffer(data, np.int8).reshape(count, dimensions).astype(np.float32)
    return values * np.asarray(scales, np.float32)[:, None]
