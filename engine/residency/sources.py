"""Where a model loaded over the API lies: under the server's model root, symlinks resolved.

Invariants: a caller's path is checked lexically before any file system call, and only
``stat`` touches the files (nothing is read); errors repeat the caller's own string, never
a server path. Blocking: never on the event loop or an engine thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidRequest, ModelRootUnset, echo

ROOT_UNSET = ("loading models over the API needs a model root: start the server with --model-root DIR "
              "(sources are then relative to it)")
_WEIGHTS = (".safetensors", ".gguf")


@dataclass(frozen=True)
class ModelFiles:
    """A model's artifact (a directory or a .gguf file) and its weight files with their sizes."""

    artifact: Path  # resolved
    weights: tuple[tuple[Path, int], ...]  # (resolved file, bytes)

    @property
    def gguf(self) -> bool:
        return self.artifact.suffix == ".gguf" and self.artifact.is_file()

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.weights)


def inside_root(source: str, root: str | None, field: str = "source") -> ModelFiles:
    """The model ``source`` names under ``root`` (a caller's path: it may not leave the root)."""
    if not root:
        raise ModelRootUnset(ROOT_UNSET)
    if not source or "\0" in source:
        raise InvalidRequest(field, "must name a model directory or .gguf file under the model root")
    parts = source.replace(os.sep, "/").split("/")
    if ".." in parts:
        raise InvalidRequest(field, f"{echo(source)} may not contain '..': model sources stay inside the model root")
    real_root = os.path.realpath(root)
    relative = source
    if os.path.isabs(source):
        inside = _relative_to(os.path.normpath(source), (os.path.normpath(os.path.abspath(root)), real_root))
        if inside is None:
            raise InvalidRequest(field, f"{echo(source)} lies outside the model root; give a path relative to it")
        relative = inside
    return _files(os.path.join(real_root, os.path.normpath(relative)), real_root, source, field)


def anywhere(source: str, field: str = "source") -> ModelFiles:
    """The model at ``source`` (the operator's: a catalog entry may lie anywhere)."""
    return _files(os.path.realpath(os.path.expanduser(source)), None, source, field)


def _files(path: str, real_root: str | None, given: str, field: str) -> ModelFiles:
    real = os.path.realpath(path)
    if real_root is not None and _relative_to(real, (real_root,)) is None:
        raise InvalidRequest(field, f"{echo(given)} leads outside the model root (through a symbolic link)")
    if os.path.isfile(real) and real.endswith(".gguf"):
        return ModelFiles(Path(real), ((Path(real), os.path.getsize(real)),))
    if not os.path.isfile(os.path.join(real, "config.json")):
        raise InvalidRequest(field, f"{echo(given)} is not a model (a directory with config.json and "
                                    "safetensors weights, or a .gguf file)")
    weights = []
    for name in sorted(os.listdir(real)):
        file = os.path.realpath(os.path.join(real, name))
        if real_root is not None and _relative_to(file, (real_root,)) is None:
            raise InvalidRequest(field, f"{echo(given)} leads outside the model root (through a symbolic link)")
        if name.endswith(_WEIGHTS) and os.path.isfile(file):
            weights.append((Path(file), os.path.getsize(file)))
    if not weights:
        raise InvalidRequest(field, f"{echo(given)} holds no weight files (.safetensors)")
    return ModelFiles(Path(real), tuple(weights))


def _relative_to(path: str, roots: tuple[str, ...]) -> str | None:
    for root in roots:
        if path == root:
            return "."
        if path.startswith(root.rstrip(os.sep) + os.sep):
            return path[len(root.rstrip(os.sep)) + 1:]
    return None


def read_through(files: ModelFiles, chunk: int = 16 << 20):
    """Reads the weight files once (into the page cache), yielding (bytes done, bytes total)."""
    total, done = files.total_bytes, 0
    for path, _ in files.weights:
        with open(path, "rb", buffering=0) as f:
            while block := f.read(chunk):
                done += len(block)
                yield done, total
