"""What a sentence-transformers model folder declares beside its weights: the pooling mode
(``1_Pooling``, or the folder ``modules.json`` names) and the input limit.

Invariant: a folder that declares neither gets mean pooling and its position table's length.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["pooling_mode", "trained_length"]


def trained_length(model_dir: Path, positions: int) -> int:
    """The input limit: sentence-transformers' ``max_seq_length`` (the length the model was
    trained at, shorter than its position table) where the model folder gives one."""
    cfg = model_dir / "sentence_bert_config.json"
    limit = json.loads(cfg.read_text()).get("max_seq_length") if cfg.is_file() else None
    return min(int(limit), positions) if limit else positions


def pooling_mode(model_dir: Path) -> str:
    """Pooling mode from the sentence-transformers Pooling config (mean if none)."""
    pooling_dir = model_dir / "1_Pooling"
    modules = model_dir / "modules.json"
    if modules.is_file():
        for module in json.loads(modules.read_text()):
            if str(module.get("type", "")).endswith("Pooling"):
                pooling_dir = model_dir / module.get("path", "1_Pooling")
                break
    cfg_path = pooling_dir / "config.json"
    if not cfg_path.is_file():
        return "mean"
    cfg = json.loads(cfg_path.read_text())
    if "pooling_mode" in cfg:  # newer sentence-transformers spelling
        enabled = [str(cfg["pooling_mode"])]
    else:
        enabled = [
            k[len("pooling_mode_"):]
            for k, v in cfg.items()
            if k.startswith("pooling_mode_") and v is True
        ]
    modes = {"mean_tokens": "mean", "mean": "mean", "cls_token": "cls", "cls": "cls"}
    if len(enabled) != 1 or enabled[0] not in modes:
        raise ValueError(
            f"unsupported pooling configuration {enabled} in {cfg_path}: "
            "exactly one of mean or cls pooling is supported"
        )
    return modes[enabled[0]]
