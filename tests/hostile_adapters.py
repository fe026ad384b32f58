"""Adapter directories a hostile or careless caller may point the server at, written
without their bulk: safetensors files whose header claims large tensors are extended
sparsely (``os.truncate``), so a GiB-sized claim costs no disk."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

CONFIG = "adapter_config.json"
WEIGHTS = "adapters.safetensors"
Q = "model.layers.1.self_attn.q_proj"  # a llama fixture layer: 64 -> 64


def config(directory: Path, rank: int = 4, **extra) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    body = {"fine_tune_type": "lora", "num_layers": 1,
            "lora_parameters": {"rank": rank, "scale": 2.0, "keys": ["self_attn.q_proj"]}, **extra}
    (directory / CONFIG).write_text(json.dumps(body))
    return directory


def sparse_weights(directory: Path, shapes: dict[str, tuple[int, ...]]) -> Path:
    """adapters.safetensors with a consistent F32 header for ``shapes``; its data is a hole."""
    header, at = {}, 0
    for name, shape in shapes.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + size]}
        at += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path = directory / WEIGHTS
    path.write_bytes(len(raw).to_bytes(8, "little") + raw)
    os.truncate(path, 8 + len(raw) + at)
    return directory


def high_rank(directory: Path, rank: int, config_rank: int | None = None) -> Path:
    """A q_proj adapter of ``rank`` in its tensors (and ``config_rank`` in its config)."""
    config(directory, rank if config_rank is None else config_rank)
    return sparse_weights(directory, {f"{Q}.lora_a": (64, rank), f"{Q}.lora_b": (rank, 64)})


def huge_header(directory: Path, claimed: int = 1 << 30) -> Path:
    """Eight bytes claiming a header of ``claimed`` bytes, and nothing after them."""
    config(directory)
    (directory / WEIGHTS).write_bytes(claimed.to_bytes(8, "little"))
    return directory


def big_config(directory: Path, size: int) -> Path:
    """A valid adapter config padded to ``size`` bytes (valid weights beside it)."""
    high_rank(directory, 4)
    body = json.loads((directory / CONFIG).read_text())
    body["notes"] = ""
    body["notes"] = "x" * (size - len(json.dumps(body)))
    (directory / CONFIG).write_text(json.dumps(body))
    return directory


def fifo_weights(directory: Path) -> Path:
    """adapters.safetensors as a named pipe: opening or reading it would block."""
    config(directory)
    os.mkfifo(directory / WEIGHTS)
    return directory


def copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target
