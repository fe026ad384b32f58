"""What a stored prefix's state depends on, as one short digest: the model's weights
(sampled), config, runtime dtype, kernels and the cache layout's versions. Entries made
under another fingerprint are never served."""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .disk_format import FORMAT

_SAMPLE = 1 << 20  # bytes read from each end of each weight file


def model_fingerprint(artifact: Path, config: dict[str, Any], dtype: str, kernels: dict[str, int],
                      kv_bits: int = 0) -> str:
    digest = hashlib.sha256()
    facts = {"format": FORMAT, "mlx": version("mlx"), "mlx_lm": version("mlx-lm"), "dtype": dtype,
             "kernels": sorted(kernels.items()), "config": config, "kv_bits": kv_bits}
    digest.update(json.dumps(facts, sort_keys=True, default=str).encode())
    weights = sorted(p for p in Path(artifact).glob("*") if p.suffix in (".safetensors", ".gguf", ".npz"))
    for path in weights:
        size = path.stat().st_size
        digest.update(f"{path.name}:{size}".encode())
        with open(path, "rb") as f:
            digest.update(f.read(_SAMPLE))
            f.seek(max(0, size - _SAMPLE))
            digest.update(f.read(_SAMPLE))
    return digest.hexdigest()[:16]
