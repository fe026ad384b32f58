"""What a stored prefix's state depends on, as one short digest: the model's weights (every
weight file hashed whole), its resolved hub revision, config, runtime dtype, quantization
and numerics settings, kernels and the cache layout's versions. Entries made under another
fingerprint are never served.

Invariants: a weight file's SHA-256 is computed once per (device, inode, size, mtime,
ctime) and kept in ``<state dir>/weight-digests.json`` (0600), so a restart rehashes
nothing that did not change; a model whose weights cannot be found has no fingerprint
(``NoWeights``: the disk tier stays off rather than serve stale KV).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .disk_files import private_dir
from .disk_format import FORMAT

log = logging.getLogger("engine.caches.fingerprint")

WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".npz")
DIGESTS_NAME = "weight-digests.json"
_KEPT = 4096  # digests the cache file keeps


class NoWeights(LookupError):
    """The model's weight files are not on this machine (or are not where its source says)."""


def model_fingerprint(artifact: Path, config: dict[str, Any], dtype: str, kernels: dict[str, int],
                      kv_bits: int = 0, *, numerics: str = "", state_dir: Path | None = None) -> str:
    """``numerics``: the numerics mode's name (how products are computed), part of the digest
    like ``dtype``, ``kv_bits`` and the config's quantization."""
    directory, revision = weights_directory(artifact)
    weights = sorted(p for p in directory.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    if not weights:
        raise NoWeights(f"no weight files ({', '.join(WEIGHT_SUFFIXES)}) in {directory}")
    digests = WeightDigests(state_dir)
    files = [(path.name, digests.of(path)) for path in weights]
    digests.save()
    facts = {"format": FORMAT, "mlx": version("mlx"), "mlx_lm": version("mlx-lm"), "dtype": dtype,
             "kernels": sorted(kernels.items()), "config": config, "kv_bits": kv_bits, "numerics": numerics,
             "revision": revision, "weights": files}
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def weights_directory(artifact: Path) -> tuple[Path, str]:
    """The local directory holding ``artifact``'s weights and its hub revision ("" when it is
    not a hub snapshot): a hub id resolves to its downloaded snapshot, never the network."""
    path = Path(artifact).expanduser()
    if not path.is_dir():
        try:
            from mlx_lm.utils import hf_repo_to_path

            path = hf_repo_to_path(str(artifact))
        except Exception as exc:  # noqa: BLE001 - not a hub id, or not downloaded
            raise NoWeights(f"{artifact} is neither a local directory nor a downloaded hub snapshot ({exc})") \
                from None
    return path, snapshot_revision(path)


def snapshot_revision(path: Path) -> str:
    """The commit hash of a Hugging Face cache snapshot (``.../snapshots/<sha>``), else ""."""
    path = Path(os.path.abspath(path))
    return path.name if path.parent.name == "snapshots" else ""


class WeightDigests:
    """Whole-file SHA-256s cached by the file's identity (kept in the state directory)."""

    def __init__(self, state_dir: Path | None):
        self._path = Path(state_dir).expanduser().resolve() / DIGESTS_NAME if state_dir is not None else None
        self._known: dict[str, str] = {}
        self._changed = False
        if self._path is not None and self._path.is_file():
            try:
                known = json.loads(self._path.read_text())
                self._known = {str(k): str(v) for k, v in known.items()} if isinstance(known, dict) else {}
            except (OSError, ValueError):
                log.warning("ignored an unreadable weight digest cache %s", self._path)

    def of(self, path: Path) -> str:
        """``path``'s SHA-256 (a hub snapshot's links are followed to their blobs)."""
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            identity = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
            digest = self._known.get(identity)
            if digest is None:
                log.info("hashing %s (%d bytes) for the prefix cache's fingerprint", path, st.st_size)
                digest = hashlib.file_digest(f, "sha256").hexdigest()
                self._known[identity] = digest
                self._changed = True
                while len(self._known) > _KEPT:  # the oldest go: files replaced long ago
                    del self._known[next(iter(self._known))]
        return digest

    def save(self) -> None:
        if self._path is None or not self._changed:
            return
        private_dir(self._path.parent)
        temp = self._path.with_name(f"{DIGESTS_NAME}.{os.getpid()}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with open(fd, "w") as f:
            json.dump(self._known, f)
        os.replace(temp, self._path)
        self._changed = False
