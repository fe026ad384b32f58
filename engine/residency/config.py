"""Knobs of the models a server loads at run time; ``setting`` fields are its command line."""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import setting


@dataclass(frozen=True)
class ResidencyConfig:
    model_root: str | None = setting(
        None, "directory LoadModel sources are relative to and may not leave (symbolic links included); "
              "unset: LoadModel of a new source is refused (catalog models still load)", metavar="DIR", type=str)
    model_catalog: str | None = setting(
        None, "JSON file of models loaded on their first request (name, source, kind, keep_alive_s, pinned, "
              "tenants, options) and aliases (docs/OPERATIONS.md, 'Models at run time')", metavar="FILE", type=str)
    models_memory_limit: int | None = setting(
        None, "bytes of weights the resident models may hold together; a load beyond it first unloads the least "
              "recently used idle model (default: the memory this machine has available at start)",
        metavar="BYTES", type=int)
    max_keep_alive_s: float = setting(
        1800.0, "the longest keep_alive_seconds a request may ask for (a tenant's max_keep_alive_s in the tokens "
                "file overrides it)", flag="--max-keep-alive", metavar="SECONDS", type=float)
