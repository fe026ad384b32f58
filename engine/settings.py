"""Settings declared once: a config dataclass field made with ``setting`` carries its
command-line flag and help beside its default, and the command line is generated
from the classes (``service/settings.py``); nothing else restates a default.

A field's flag is ``--`` plus its name with dashes unless given. A bool field whose
default is True takes a ``--no-...`` flag that turns it off. Fields without
``setting`` are not on the command line.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def setting(default: Any, help: str, *, flag: str | None = None, metavar: str | None = None,
            type: type | None = None, choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field with ``default``, settable as ``flag`` (``type`` is needed when the
    default is None; ``choices`` narrows an enum's values). An empty ``help`` shares the
    flag of the field that declares it."""
    return dataclasses.field(default=default, metadata={"help": help, "flag": flag, "metavar": metavar,
                                                         "type": type, "choices": choices})


def settings_of(cls) -> list[dataclasses.Field]:
    """The fields of ``cls`` declared with ``setting``, in declaration order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def flag_of(f: dataclasses.Field) -> str:
    if f.metadata["flag"]:
        return f.metadata["flag"]
    return ("--no-" if f.default is True else "--") + f.name.replace("_", "-")
