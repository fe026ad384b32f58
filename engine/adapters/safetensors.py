"""A safetensors file read by hand: its header checked before any tensor data is read.

Invariant: a header is accepted only when every tensor is floating, its span is exactly
shape x item size, and the spans tile the data with no gap, overlap or overrun.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_HEADER_BYTES = 1 << 20
PREFIX = 8
DTYPES = {"F32": (4, np.float32), "F16": (2, np.float16), "BF16": (2, np.uint16)}  # BF16: as raw bits
SMALLEST_ITEM = min(size for size, _ in DTYPES.values())


class BadFile(ValueError):
    """The file is no safetensors file this server reads (the message says why)."""


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offset into the data, after the header
    end: int

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def header_length(prefix: bytes, file_size: int) -> int:
    if len(prefix) < PREFIX:
        raise BadFile("is shorter than a safetensors header")
    n = int.from_bytes(prefix[:PREFIX], "little")
    if n > MAX_HEADER_BYTES:
        raise BadFile(f"declares a header of {n} bytes, over the limit of {MAX_HEADER_BYTES}")
    if PREFIX + n > file_size:
        raise BadFile(f"declares a header of {n} bytes but the file holds {file_size} bytes")
    return n


def parse_header(raw: bytes, data_size: int) -> dict[str, Tensor]:
    """Name -> tensor of a header whose data part is ``data_size`` bytes long."""
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadFile(f"has a header that is not JSON ({_short(exc)})") from None
    if not isinstance(header, dict):
        raise BadFile("has a header that is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise BadFile("has __metadata__ that is not an object of strings")
    tensors = {name: _tensor(name, entry) for name, entry in header.items()}
    if not tensors:
        raise BadFile("holds no tensors")
    at = 0
    for t in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.begin != at:
            raise BadFile("has tensor data that overlaps or leaves gaps")
        at = t.end
    if at != data_size:
        raise BadFile(f"declares {at} bytes of tensor data but holds {data_size}")
    return tensors


def arrays(tensors: dict[str, Tensor], data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """MLX arrays of ``tensors`` from the file's data part (engine thread)."""
    import mlx.core as mx

    out = {}
    for name, t in tensors.items():
        size, np_type = DTYPES[t.dtype]
        values = np.frombuffer(data, dtype=np_type, count=t.elements, offset=t.begin).reshape(t.shape)
        array = mx.array(values)
        out[name] = array.view(mx.bfloat16) if t.dtype == "BF16" else array
    return out


def _tensor(name: str, entry: Any) -> Tensor:
    if not isinstance(entry, dict):
        raise BadFile(f"describes tensor {name[:80]!r} with something that is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPES:
        raise BadFile(f"holds tensor {name[:80]!r} of dtype {str(dtype)[:16]!r} "
                      f"(adapters are {', '.join(DTYPES)})")
    if not (isinstance(shape, list) and len(shape) <= 8 and all(_count(d) for d in shape)):
        raise BadFile(f"gives tensor {name[:80]!r} a shape that is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_count(o) for o in offsets)):
        raise BadFile(f"gives tensor {name[:80]!r} data_offsets that are not two non-negative integers")
    t = Tensor(dtype, tuple(shape), offsets[0], offsets[1])
    if t.end - t.begin != t.elements * DTYPES[dtype][0]:
        raise BadFile(f"gives tensor {name[:80]!r} data_offsets that do not match its shape and dtype")
    return t


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a name appears twice")
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short(exc: Exception) -> str:
    return str(exc)[:120]
