"""The command line is generated from the config classes' ``setting`` fields: every
field has a flag, its default is the class's, and a value given reaches the field."""

from __future__ import annotations

import dataclasses
import enum

import pytest

from engine.config import SECTIONS, EngineConfig
from engine.embedding.config import EmbeddingConfig
from engine.generation.config import SchedulerConfig
from engine.requests import SpeculationMode
from engine.settings import flag_of, settings_of
from service import cli
from service.assembly import build_config
from service.flags import from_args
from service.server import ServerOptions

CLASSES = (*(cls for _, cls in SECTIONS if cls is not EmbeddingConfig), ServerOptions)  # its one flag: below


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_defaults_are_the_classes_own(cls):
    args = cli.build_parser().parse_args(["serve"])
    assert from_args(cls, args) == cls()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_flag_reaches_its_field(cls):
    argv, expected = ["serve"], {}
    for f in settings_of(cls):
        if not f.metadata["help"]:
            continue
        default = f.default
        if isinstance(default, bool):
            argv.append(flag_of(f))
            expected[f.name] = not default
        elif isinstance(default, enum.Enum):
            argv += [flag_of(f), "off"]
            expected[f.name] = SpeculationMode.OFF
        elif f.metadata["choices"]:  # one out of a few: the last one
            argv += [flag_of(f), str(f.metadata["choices"][-1])]
            expected[f.name] = f.metadata["choices"][-1]
        elif f.metadata["type"] is str or isinstance(default, str):
            argv += [flag_of(f), "/x"]
            expected[f.name] = "/x"
        else:
            value = (f.metadata["type"] or type(default))(7)
            argv += [flag_of(f), str(value)]
            expected[f.name] = value
    built = from_args(cls, cli.build_parser().parse_args(argv))
    assert {name: getattr(built, name) for name in expected} == expected
    shared = [f.name for f in settings_of(cls) if not f.metadata["help"]]
    for name in shared:  # a field sharing a flag takes the flag's value
        owner = next(f for f in settings_of(cls) if f.metadata["help"] and flag_of(f) == flag_of(
            next(g for g in dataclasses.fields(cls) if g.name == name)))
        assert getattr(built, name) == getattr(built, owner.name)


def test_embedding_engines_take_the_shared_priority_aging_flag():
    args = cli.build_parser().parse_args(["serve", "--priority-aging", "2.5"])
    assert from_args(EmbeddingConfig, args).priority_aging_s == 2.5 == from_args(SchedulerConfig, args).priority_aging_s
    assert from_args(EmbeddingConfig, cli.build_parser().parse_args(["serve"])) == EmbeddingConfig()


def test_the_command_line_reads_back_into_one_config_tree():
    parse = cli.build_parser().parse_args
    assert build_config(parse(["serve"])) == EngineConfig()  # every section's defaults are its flags'
    tree = build_config(parse(["serve", "--max-active", "3", "--priority-aging", "2.5", "--max-choices", "4"]))
    assert tree.generation.scheduler.max_active == 3
    assert tree.generation.scheduler.priority_aging_s == tree.embedding.priority_aging_s == 2.5  # one aging
    assert tree.limits.max_choices == tree.generation.limits.max_choices == 4  # one Limits for every kind
