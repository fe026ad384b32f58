"""The pieces of models at run time that need no server: the catalog's format and its errors,
sources kept under the model root, a request's keep-alive within its tenant's maximum, the
tokens file's max_keep_alive_s and the serve command's checks of its flags."""

from __future__ import annotations

import json
import os

import pytest

from engine.errors import InvalidRequest, ModelRootUnset
from engine.residency.catalog import ModelOptions, read_catalog
from engine.residency.sources import inside_root
from service import cli
from service.bearer_tokens import parse_lines
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.lifecycle_convert import request_keep_alive


def write(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_a_catalog_reads_models_options_tenants_and_aliases(tmp_path):
    root = tmp_path / "models"
    catalog = read_catalog(write(tmp_path / "c.json", {
        "models": [{"name": "qwen", "source": "q.gguf", "keep_alive_s": 0, "tenants": ["a"],
                    "options": {"kv_bits": 8, "context_length": 4096}},
                   {"name": "e5", "source": "/abs/e5", "kind": "embedding", "pinned": True}],
        "aliases": {"chat": "qwen:support", "small": "qwen"}}), str(root))
    qwen, e5 = catalog.models
    assert qwen.source == str(root / "q.gguf") and e5.source == "/abs/e5"  # relative to the root
    assert qwen.options == ModelOptions(kv_bits=8, context_length=4096) and qwen.keep_alive_s == 0.0
    assert qwen.allows("a") and not qwen.allows("b") and e5.allows("anyone")
    assert e5.pinned and e5.kind == "embedding" and e5.keep_alive_s is None and qwen.on_demand
    assert catalog.aliases == {"chat": ("qwen", "support"), "small": ("qwen", "")}
    alone = read_catalog(write(tmp_path / "d.json", {"models": [{"name": "m", "source": "m"}]}), None)
    assert alone.models[0].source == str(tmp_path / "m")  # without a root: the catalog's directory


@pytest.mark.parametrize("data, says", [
    ({"models": [{"name": "a b", "source": "x"}]}, "a name is 1 to 64"),
    ({"models": [{"name": "a"}]}, "an entry has 'name' and 'source'"),
    ({"models": [{"name": "a", "source": "x", "kind": "audio"}]}, "kind must be one of"),
    ({"models": [{"name": "a", "source": "x", "options": {"kv_bits": 3}}]}, "kv_bits must be"),
    ({"models": [{"name": "a", "source": "x", "options": {"dtype": "int4"}}]}, "dtype must be"),
    ({"models": [{"name": "a", "source": "x", "options": {"rope": 2}}]}, "options are"),
    ({"models": [{"name": "a", "source": "x", "tenants": "team"}]}, "tenants is a list"),
    ({"models": [{"name": "a", "source": "x"}, {"name": "a", "source": "y"}]}, "names repeat"),
    ({"models": [{"name": "a", "source": "x"}], "aliases": {"a": "a"}}, "also a model's name"),
    ({"models": [], "extra": 1}, "'models' and 'aliases'"),
])
def test_a_malformed_catalog_is_refused_naming_the_entry(tmp_path, data, says):
    with pytest.raises(ValueError, match=says):
        read_catalog(write(tmp_path / "c.json", data), None)


def test_sources_stay_under_the_root_and_are_only_stat_ed(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    for place in (root / "m", outside):
        place.mkdir(parents=True)
        (place / "config.json").write_text("{}")
        (place / "model.safetensors").write_bytes(b"x" * 10)
    (root / "link").symlink_to(outside)
    (root / "m2").mkdir()
    (root / "m2" / "config.json").write_text("{}")
    (root / "m2" / "model.safetensors").symlink_to(outside / "model.safetensors")  # one weight file leads out
    files = inside_root("m", str(root))
    assert files.total_bytes == 10 and not files.gguf
    assert inside_root(str(root / "m"), str(root)).artifact == files.artifact  # absolute inside: fine
    for source, says in [("../outside", "may not contain '..'"), (str(outside), "outside the model root"),
                         ("link", "through a symbolic link"), ("m2", "through a symbolic link"),
                         ("missing", "is not a model"), ("", "must name")]:
        with pytest.raises(InvalidRequest, match=says) as err:
            inside_root(source, str(root))
        assert str(root) not in err.value.message
    with pytest.raises(ModelRootUnset):
        inside_root("m", None)
    sparse = root / "huge.gguf"
    with open(sparse, "wb") as f:
        f.truncate(1 << 40)
    huge = inside_root("huge.gguf", str(root))
    assert huge.gguf and huge.total_bytes == 1 << 40 and os.stat(sparse).st_blocks == 0  # nothing written or read


def test_a_requests_keep_alive_is_held_to_its_tenants_maximum():
    assert request_keep_alive(pb.GenerateRequest(), 60) is None
    assert request_keep_alive(pb.GenerateRequest(keep_alive_seconds=30), 60) == 30
    assert request_keep_alive(pb.GenerateRequest(keep_alive_seconds=600), 60) == 60
    assert request_keep_alive(pb.EmbedRequest(keep_alive_seconds=-1), 60) == 60  # "keep": the most allowed
    assert request_keep_alive(pb.EmbedRequest(keep_alive_seconds=0), 60) == 0
    with pytest.raises(InvalidRequest, match="keep_alive_seconds"):
        request_keep_alive(pb.GenerateRequest(keep_alive_seconds=float("nan")), 60)


def test_the_tokens_file_sets_a_tenants_keep_alive_maximum():
    table = parse_lines([(1, "t1 team inference max_keep_alive_s=90")], "tokens")
    assert table.tenants()["team"].max_keep_alive_s == 90.0
    with pytest.raises(ValueError, match="max_keep_alive_s must be"):
        parse_lines([(1, "t1 team inference max_keep_alive_s=-3")], "tokens")


@pytest.mark.parametrize("flags, says", [
    (["--model-root", "/no/such/dir"], "--model-root must be an existing directory"),
    (["--model-catalog", "/no/such/file.json"], "--model-catalog must be an existing file"),
    (["--models-memory-limit", "0"], "--models-memory-limit must be at least 1"),
])
def test_serve_refuses_bad_run_time_flags(flags, says, capsys):
    with pytest.raises(SystemExit):
        cli.main(["serve", *flags])
    assert says in capsys.readouterr().err


def test_serve_refuses_a_malformed_catalog(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["serve", "--model-catalog", write(tmp_path / "c.json", {"models": [{"name": "x"}]})])
    assert "an entry has 'name' and 'source'" in capsys.readouterr().err
