"""The model fingerprint that names the disk tier's entries: every weight byte counts, a hub
model's resolved revision counts, and a restart rehashes nothing that did not change."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine.caches import fingerprint as fp
from engine.caches.fingerprint import NoWeights, WeightDigests


CONFIG = {"model_type": "llama", "hidden_size": 8}


def _model(directory: Path, size: int = 3 << 20) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(CONFIG))
    (directory / "model.safetensors").write_bytes(bytes(i % 251 for i in range(size)))
    return directory


def _fingerprint(artifact, state: Path, **kw) -> str:
    return fp.model_fingerprint(artifact, CONFIG, "float32", {}, 0, state_dir=state, **kw)


def test_a_change_in_the_middle_of_a_weight_file_changes_the_fingerprint(tmp_path):
    model = _model(tmp_path / "m")
    state = tmp_path / "state"
    before = _fingerprint(model, state)
    weights = model / "model.safetensors"
    stamp = weights.stat()
    with open(weights, "r+b") as f:  # 1.5 MiB in: outside the first and the last MiB
        f.seek(len(weights.read_bytes()) // 2)
        f.write(b"\xff")
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # a copy that keeps the time (cp -p)
    assert _fingerprint(model, state) != before


def test_the_settings_that_change_numerics_change_the_fingerprint(tmp_path):
    model = _model(tmp_path / "m", 1024)
    state = tmp_path / "state"
    base = _fingerprint(model, state)
    assert _fingerprint(model, state) == base
    assert fp.model_fingerprint(model, CONFIG, "float16", {}, 0, state_dir=state) != base
    assert fp.model_fingerprint(model, CONFIG, "float32", {}, 8, state_dir=state) != base
    assert _fingerprint(model, state, numerics="int8-activations") != base


def test_a_restart_reads_the_digests_instead_of_hashing_again(tmp_path, monkeypatch):
    model = _model(tmp_path / "m", 1 << 20)
    state = tmp_path / "state"
    first = _fingerprint(model, state)
    assert (state / fp.DIGESTS_NAME).stat().st_mode & 0o777 == 0o600

    def no_hashing(*args, **kwargs):
        raise AssertionError("a weight file was hashed again")

    monkeypatch.setattr(fp.hashlib, "file_digest", no_hashing)
    assert _fingerprint(model, state) == first
    (model / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(AssertionError, match="hashed again"):  # a changed file is hashed, not trusted
        WeightDigests(state).of(model / "model.safetensors")


def _hub(root: Path, revision: str, source: Path) -> None:
    """``org/tiny`` in the Hugging Face cache layout: blobs, a snapshot of links, refs/main."""
    repo = root / "models--org--tiny"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for path in source.iterdir():
        blob = repo / "blobs" / f"{revision}-{path.name}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, blob)
        (snapshot / path.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)


def test_a_hub_model_is_fingerprinted_by_its_revision_and_weights(tmp_path, monkeypatch):
    import huggingface_hub.constants

    hub = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = _model(tmp_path / "m", 1 << 20)
    state = tmp_path / "state"
    first_revision = "a" * 40
    _hub(hub, first_revision, model)
    directory, revision = fp.weights_directory(Path("org/tiny"))
    assert revision == first_revision and directory.name == first_revision
    first = _fingerprint(Path("org/tiny"), state)
    _hub(hub, "b" * 40, model)  # the same bytes under a new revision
    moved = _fingerprint(Path("org/tiny"), state)
    assert moved != first
    weights = hub / "models--org--tiny" / "blobs" / f"{'b' * 40}-model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[len(raw) // 2] ^= 1
    weights.write_bytes(raw)  # new weights behind the same name and revision
    assert _fingerprint(Path("org/tiny"), state) not in (first, moved)


def test_a_model_whose_weights_are_nowhere_has_no_fingerprint(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(NoWeights):
        _fingerprint(Path("org/not-downloaded"), tmp_path / "state")
