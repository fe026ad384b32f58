"""A GGUF file as the converter reads it (via ``gguf``): plain metadata, memory-mapped tensors.

Invariant: shapes are row-major; float32 metadata is given in its shortest decimal form.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["GGUFFile", "GGUFTensor", "read_gguf"]


@dataclass(frozen=True)
class GGUFTensor:
    name: str  # e.g. "blk.0.attn_q.weight"
    qtype: int  # gguf.GGMLQuantizationType
    type_name: str  # "Q4_K", "F32", ...
    shape: tuple[int, ...]  # row-major: (rows, cols) for a matrix
    data: np.ndarray  # float values, or uint8 blocks [rows, bytes per row]
    n_bytes: int

    @property
    def base(self) -> str:
        """The name without its last part ("blk.0.attn_q" for "blk.0.attn_q.weight")."""
        return self.name.rsplit(".", 1)[0]

    @property
    def suffix(self) -> str:
        return self.name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    metadata: dict[str, Any]
    tensors: list[GGUFTensor]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)


def read_gguf(path: Path) -> GGUFFile:
    """The file's metadata and tensors (the tensor data stays memory-mapped)."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"cannot read GGUF file {path}: {exc}") from exc
    metadata = {name: _value(field, gguf.GGUFValueType) for name, field in reader.fields.items()
                if not name.startswith("GGUF.")}
    tensors = [GGUFTensor(t.name, int(t.tensor_type), t.tensor_type.name,
                          tuple(int(d) for d in reversed(t.shape)), t.data, int(t.n_bytes))
               for t in reader.tensors]
    return GGUFFile(Path(path), metadata, tensors)


def _value(field, types) -> Any:
    value = field.contents()
    kind = field.types[-1] if field.types else None
    if kind == types.FLOAT32:
        if isinstance(value, list):
            return [_short(v) for v in value]
        return _short(value)
    return value


def _short(v: float) -> float:
    return float(str(np.float32(v)))
