"""The models a server may load at run time: ``--model-catalog FILE`` entries and aliases.

A catalog is JSON::

    {"models": [{"name": "qwen", "source": "qwen-1b.gguf", "kind": "generation",
                 "keep_alive_s": 300, "pinned": false, "tenants": ["team-a"],
                 "options": {"dtype": "auto", "kv_bits": 8, "context_length": 4096}}],
     "aliases": {"chat": "qwen:tone", "small": "smollm2-135m-instruct"}}

Invariants: names follow the request identifier rules; a relative source is relative to the
model root (else the catalog file's directory); ``tenants`` absent lets every tenant load the
entry, a list only those named; pinning is the catalog's, never a request's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("generation", "embedding", "speech")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_ENTRY_KEYS = {"name", "source", "kind", "keep_alive_s", "pinned", "tenants", "options"}
_OPTION_KEYS = {"dtype", "kv_bits", "draft_model", "context_length"}
DTYPES = ("", "auto", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class ModelOptions:
    """How to load a model; empty or zero keeps the server's setting."""

    dtype: str = ""
    kv_bits: int = 0
    draft_model: str = ""
    context_length: int = 0


@dataclass(frozen=True)
class ModelSpec:
    """One model the residency may hold: what to load, and its lifetime rules."""

    name: str
    source: str  # a resolved path (the operator's, or checked under the model root)
    kind: str = "generation"
    options: ModelOptions = ModelOptions()
    keep_alive_s: float | None = None  # None: kept; 0: unload once idle; negative: kept
    pinned: bool = False  # never unloaded for room or idleness
    tenants: frozenset[str] | None = None  # who may load it on demand (None: everyone)
    on_demand: bool = False  # a catalog entry: listed while unloaded, loaded by its first request

    def allows(self, tenant: str) -> bool:
        return self.tenants is None or tenant in self.tenants


@dataclass(frozen=True)
class Catalog:
    models: tuple[ModelSpec, ...] = ()
    aliases: dict[str, tuple[str, str]] = field(default_factory=dict)  # alias -> (model, adapter)


def check_name(name: str, where: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{where}: a name is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-', got {name!r}")
    return name


def check_options(options: ModelOptions, where: str) -> ModelOptions:
    if options.dtype not in DTYPES:
        raise ValueError(f"{where}: dtype must be one of {', '.join(d for d in DTYPES if d)}")
    if options.kv_bits not in (0, 4, 8):
        raise ValueError(f"{where}: kv_bits must be 0, 4 or 8")
    if not 0 <= options.context_length <= 1 << 24:
        raise ValueError(f"{where}: context_length must be between 0 and {1 << 24}")
    return options


def read_catalog(path: str | Path, root: str | None) -> Catalog:
    """The catalog at ``path``; ValueError naming the entry for anything malformed."""
    path = Path(path)
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or set(data) - {"models", "aliases"}:
        raise ValueError(f"{path.name}: a catalog is an object with 'models' and 'aliases'")
    base = Path(root) if root else path.resolve().parent
    models = tuple(_entry(e, i, base) for i, e in enumerate(data.get("models", [])))
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise ValueError(f"{path.name}: model names repeat")
    aliases = {}
    for alias, target in (data.get("aliases") or {}).items():
        check_name(alias, f"alias {alias!r}")
        if not isinstance(target, str) or not target:
            raise ValueError(f"alias {alias!r}: the target is 'model' or 'model:adapter'")
        model, _, adapter = target.partition(":")
        check_name(model, f"alias {alias!r}")
        if adapter:
            check_name(adapter, f"alias {alias!r} (adapter)")
        if alias in names:
            raise ValueError(f"alias {alias!r} is also a model's name")
        aliases[alias] = (model, adapter)
    return Catalog(models, aliases)


def _entry(entry: Any, index: int, base: Path) -> ModelSpec:
    where = f"catalog model {index}"
    if not isinstance(entry, dict) or set(entry) - _ENTRY_KEYS or "name" not in entry or "source" not in entry:
        raise ValueError(f"{where}: an entry has 'name' and 'source' (and optionally "
                         f"{', '.join(sorted(_ENTRY_KEYS - {'name', 'source'}))})")
    name = check_name(entry["name"], where)
    where = f"catalog model {name!r}"
    kind = entry.get("kind", "generation")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind must be one of {', '.join(KINDS)}")
    raw = entry.get("options") or {}
    if not isinstance(raw, dict) or set(raw) - _OPTION_KEYS:
        raise ValueError(f"{where}: options are {', '.join(sorted(_OPTION_KEYS))}")
    options = check_options(ModelOptions(**raw), where)
    if kind == "speech" and raw:
        raise ValueError(f"{where}: a speech model takes no options")
    keep = entry.get("keep_alive_s")
    if keep is not None and not isinstance(keep, (int, float)):
        raise ValueError(f"{where}: keep_alive_s is a number of seconds")
    tenants = entry.get("tenants")
    if tenants is not None and not (isinstance(tenants, list) and all(isinstance(t, str) for t in tenants)):
        raise ValueError(f"{where}: tenants is a list of tenant names")
    source = Path(str(entry["source"])).expanduser()
    return ModelSpec(name, str(source if source.is_absolute() else base / source), kind, options,
                     None if keep is None else float(keep), bool(entry.get("pinned", False)),
                     None if tenants is None else frozenset(tenants), on_demand=True)
