"""Where an adapter directory lies, and what clients are shown of it.

Invariants: an API path (``inside_root``) stays under the root, symlinks resolved, and is
checked lexically before any file system call; errors never repeat a server path.
Blocking: never on the event loop or the engine thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import AdapterRootUnset, InvalidRequest, echo

CONFIG = "adapter_config.json"
WEIGHTS = "adapters.safetensors"
ROOT_UNSET = ("loading adapters over the API needs an adapter root: start the server with --adapter-root DIR "
              "(paths are then relative to it)")


@dataclass(frozen=True)
class Place:
    directory: Path  # resolved
    config: Path  # resolved
    weights: Path  # resolved
    shown: str  # relative to the root as given, or the directory's name
    given: str  # the caller's own string, which errors may repeat


def inside_root(path: str, root: str | None, field: str = "path") -> Place:
    """The adapter directory ``path`` names under ``root``."""
    if not root:
        raise AdapterRootUnset(ROOT_UNSET)
    _check_text(path, field)
    parts = path.replace(os.sep, "/").split("/")
    if ".." in parts:
        raise InvalidRequest(field, f"{echo(path)} may not contain '..': adapter paths stay inside the adapter root")
    real_root = os.path.realpath(root)
    relative = path
    if os.path.isabs(path):
        inside = _relative_to(os.path.normpath(path), (os.path.normpath(os.path.abspath(root)), real_root))
        if inside is None:
            raise InvalidRequest(field, f"{echo(path)} lies outside the adapter root; give a path relative to it")
        relative = inside
    relative = os.path.normpath(relative)
    shown = "" if relative == "." else relative.replace(os.sep, "/")
    return _place(os.path.join(real_root, relative), real_root, shown or ".", path, field)


def anywhere(path: str, root: str | None, field: str = "adapters") -> Place:
    """The adapter directory at ``path`` (the operator's: may lie anywhere)."""
    _check_text(path, field)
    real = os.path.realpath(os.path.expanduser(path))
    shown = None
    if root:
        shown = _relative_to(real, (os.path.realpath(root),))
    if shown is None:
        shown = os.path.basename(real) or "."
    return _place(real, None, shown.replace(os.sep, "/"), path, field)


def _place(directory: str, real_root: str | None, shown: str, given: str, field: str) -> Place:
    real_dir = os.path.realpath(directory)
    files = [os.path.realpath(os.path.join(real_dir, name)) for name in (CONFIG, WEIGHTS)]
    if real_root is not None and any(_relative_to(p, (real_root,)) is None for p in (real_dir, *files)):
        raise InvalidRequest(field, f"{echo(given)} leads outside the adapter root (through a symbolic link)")
    if not os.path.isdir(real_dir):
        raise InvalidRequest(field, f"{echo(given)} is not an adapter directory (it needs {CONFIG} and {WEIGHTS})")
    return Place(Path(real_dir), Path(files[0]), Path(files[1]), shown, given)


def _relative_to(path: str, roots: tuple[str, ...]) -> str | None:
    """``path`` relative to the first of ``roots`` it lies in (all absolute and normal)."""
    for root in roots:
        if path == root:
            return "."
        if path.startswith(root.rstrip(os.sep) + os.sep):
            return path[len(root.rstrip(os.sep)) + 1:]
    return None


def _check_text(path: str, field: str) -> None:
    if not path:
        raise InvalidRequest(field, "is required")
    if "\x00" in path:
        raise InvalidRequest(field, "may not contain NUL characters")
