"""Reading an adapter directory as ``mlx_lm.lora`` writes it.

::

    adapter_config.json    {"fine_tune_type": "lora" | "dora", "num_layers": 16,
                            "lora_parameters": {"rank": 8, "scale": 20.0, "dropout": 0.0,
                                                "keys": ["self_attn.q_proj", ...]}, ...}
    adapters.safetensors   "<module path>.lora_a" [in, rank], "<module path>.lora_b"
                           [rank, out] (DoRA also "<module path>.m" [out])

A directory that is not such an adapter (missing files, unreadable JSON, a full
fine-tune, a rank or scale that is not a number) is refused as an invalid ``path``.
Whether it fits a given base model is ``fit``'s question.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from ..errors import InvalidRequest

CONFIG = "adapter_config.json"
WEIGHTS = "adapters.safetensors"
KINDS = ("lora", "dora")


@dataclass(frozen=True)
class AdapterSource:
    path: Path
    fine_tune_type: str  # "lora" or "dora"
    num_layers: int  # the last num_layers blocks carry adapters (<= 0: all of them)
    rank: int
    scale: float
    keys: tuple[str, ...] | None  # module names inside a block; None: every linear layer
    tensors: dict[str, mx.array]

    @property
    def dora(self) -> bool:
        return self.fine_tune_type == "dora"


def read_adapter(path: str | Path, field: str = "path") -> AdapterSource:
    """The adapter at ``path``; ``InvalidRequest`` naming ``field`` if it is none."""
    root = Path(path).expanduser()
    if not (root / CONFIG).is_file() or not (root / WEIGHTS).is_file():
        raise InvalidRequest(field, f"{str(path)!r} is not an adapter directory (it needs {CONFIG} and {WEIGHTS})")
    try:
        config = json.loads((root / CONFIG).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidRequest(field, f"cannot read {CONFIG}: {exc}") from None
    kind, num_layers, rank, scale, keys = _settings(config, field)
    try:
        tensors = mx.load(str(root / WEIGHTS))
    except Exception as exc:  # noqa: BLE001 - a damaged file is the caller's bad input
        raise InvalidRequest(field, f"cannot read {WEIGHTS}: {exc}") from None
    if not isinstance(tensors, dict) or not tensors:
        raise InvalidRequest(field, f"{WEIGHTS} holds no tensors")
    return AdapterSource(root, kind, num_layers, rank, scale, keys, tensors)


def _settings(config: Any, field: str) -> tuple[str, int, int, float, tuple[str, ...] | None]:
    if not isinstance(config, dict):
        raise InvalidRequest(field, f"{CONFIG} must hold a JSON object")
    kind = config.get("fine_tune_type", "lora")
    if kind not in KINDS:
        raise InvalidRequest(field, f"fine_tune_type {kind!r} is not an adapter (expected one of {', '.join(KINDS)})")
    params = config.get("lora_parameters")
    if not isinstance(params, dict):
        raise InvalidRequest(field, f"{CONFIG} has no lora_parameters object")
    rank, scale, keys = params.get("rank"), params.get("scale"), params.get("keys")
    num_layers = config.get("num_layers", 0)
    if not _is_int(rank) or rank < 1:
        raise InvalidRequest(field, f"lora_parameters.rank must be a positive integer, not {rank!r}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale != scale:
        hint = " (mlx-lm names it 'scale', not 'alpha')" if "alpha" in params else ""
        raise InvalidRequest(field, f"lora_parameters.scale must be a number, not {scale!r}{hint}")
    if not _is_int(num_layers):
        raise InvalidRequest(field, f"num_layers must be an integer, not {num_layers!r}")
    if keys is not None and not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise InvalidRequest(field, "lora_parameters.keys must be a list of module names")
    return kind, int(num_layers), int(rank), float(scale), tuple(keys) if keys is not None else None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
