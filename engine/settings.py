"""Settings declared once: a ``setting`` field carries its flag and help beside its default.

Invariant: nothing else restates a default; a True bool takes a ``--no-...`` flag.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def setting(default: Any, help: str, *, flag: str | None = None, metavar: str | None = None,
            type: type | None = None, choices: tuple[Any, ...] | None = None) -> Any:
    """A dataclass field with ``default``, settable as ``flag``; an empty ``help`` shares another field's flag."""
    return dataclasses.field(default=default, metadata={"help": help, "flag": flag, "metavar": metavar,
                                                         "type": type, "choices": choices})


def settings_of(cls) -> list[dataclasses.Field]:
    """The fields of ``cls`` declared with ``setting``, in declaration order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def flag_of(f: dataclasses.Field) -> str:
    if f.metadata["flag"]:
        return f.metadata["flag"]
    return ("--no-" if f.default is True else "--") + f.name.replace("_", "-")
