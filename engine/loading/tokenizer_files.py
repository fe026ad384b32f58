"""The files that let another program tokenize exactly as a loaded model does.

Invariant: the files always carry the chat template. Blocking file I/O: call off the event loop.
"""

from __future__ import annotations

import json
from pathlib import Path

from .model import LoadedModel

# What Hugging Face tokenizers read, plus the model and generation configs.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json",
    "generation_config.json", "chat_template.jinja", "chat_template.json", "tokenizer.model",
    "vocab.json", "merges.txt", "added_tokens.json",
)


def folder_files(folder: Path) -> dict[str, bytes]:
    """File name -> content, for the files of ``TOKENIZER_FILES`` in ``folder``."""
    return {name: (folder / name).read_bytes() for name in TOKENIZER_FILES if (folder / name).is_file()}


def tokenizer_files(model: LoadedModel) -> dict[str, bytes]:
    """File name -> content, for the files of ``TOKENIZER_FILES`` the model has."""
    files = folder_files(_folder(model.artifact))
    template = getattr(model.tokenizer, "chat_template", None)
    if template and "chat_template.jinja" not in files and "chat_template.json" not in files:
        config = json.loads(files.get("tokenizer_config.json", b"{}"))
        if not config.get("chat_template"):
            config["chat_template"] = template
            files["tokenizer_config.json"] = json.dumps(config, indent=2, ensure_ascii=False).encode()
    return files


def _folder(artifact: Path) -> Path:
    if artifact.is_dir():
        return artifact
    from mlx_lm.utils import hf_repo_to_path  # hub ids: the downloaded snapshot

    return Path(hf_repo_to_path(str(artifact)))
