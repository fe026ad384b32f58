"""The command line generated from the config classes' ``setting`` fields, and back."""

from __future__ import annotations

import argparse
import enum
from typing import Any

from engine.settings import flag_of, settings_of


def add_settings(parser, cls) -> None:
    """Adds a flag for each ``setting`` field of ``cls`` to ``parser`` (or an argument group)."""
    for f in settings_of(cls):
        if not f.metadata["help"]:  # shares another field's flag
            continue
        flag, default, help_ = flag_of(f), f.default, f.metadata["help"].replace("%", "%%")
        if isinstance(default, bool):  # a switch; --no-... for a field that is on by default
            parser.add_argument(flag, dest=_dest(f), action="store_true", help=help_)
        elif isinstance(default, enum.Enum):
            parser.add_argument(flag, dest=_dest(f), choices=f.metadata["choices"] or [m.value for m in type(default)],
                                default=default.value,
                                help=help_)
        else:
            parser.add_argument(flag, dest=_dest(f), type=f.metadata["type"] or type(default), default=default,
                                choices=f.metadata["choices"],
                                metavar=f.metadata["metavar"] or _dest(f).upper(), help=help_)


def from_args(cls, args: argparse.Namespace, **others: Any):
    """An instance of ``cls`` from the parsed flags (``others`` for its fields that are none)."""
    values = {}
    for f in settings_of(cls):
        value = getattr(args, _dest(f))  # a field sharing another's flag shares its value
        if isinstance(f.default, enum.Enum):
            value = type(f.default)(value)
        elif f.default is True:
            value = not value
        values[f.name] = value
    return cls(**values, **others)


def _dest(f) -> str:
    """Where argparse keeps a field's value (named for its flag)."""
    return flag_of(f).removeprefix("--").replace("-", "_")
