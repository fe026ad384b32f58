"""The disk tier serves only what it wrote: a tampered entry (its plain SHA-256
recomputed), an entry made under another key, symbolic links, FIFOs, directories and
truncated files planted in the cache directory are never served and never block the start
or the reader thread; directories are 0700, files and the generated key 0600; files name
no tenant."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.caches.disk import DiskTier
from engine.caches.disk_files import Refused
from engine.caches.disk_format import SUFFIX, to_host
from engine.caches.disk_key import KEY_NAME, load_key
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.tenancy import Tenant
from tests.test_prefix_tiers import PROMPT, _engine, _filled, _run

KEY = b"k" * 32
DTYPES = {"F32": np.float32, "F16": np.float16}


@pytest.fixture
def state(tmp_path_factory, monkeypatch) -> Path:
    """The server's state directory (where a generated key goes): the test's own."""
    path = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("MLX_GRPC_CACHE", str(path))
    return path


def _config(directory: Path, key_file: Path | None = None) -> GenerationConfig:
    return GenerationConfig(scheduler=SchedulerConfig(
        prefix_cache_dir=str(directory), prefix_cache_key_file=str(key_file) if key_file else None))


def _tamper(path: Path) -> None:
    """What someone who can write the directory but holds no key can do: random KV of the
    same shapes, the header's plain SHA-256 of it recomputed."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n])
    rng = np.random.default_rng(0)
    data = bytearray()
    for i in range(len(head) - 1):
        span = head[f"t{i}"]
        size = span["data_offsets"][1] - span["data_offsets"][0]
        if span["dtype"] in DTYPES:
            data += rng.normal(0, 3, size // np.dtype(DTYPES[span["dtype"]]).itemsize).astype(
                DTYPES[span["dtype"]]).tobytes()
        else:
            data += rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    meta = head["__metadata__"]
    for field in ("sha256", "data_mac"):  # the old checksum, and the best guess at a MAC without the key
        if field in meta:
            meta[field] = hashlib.sha256(data).hexdigest()
    header = json.dumps(head, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(data))


def _files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*" + SUFFIX))


async def _cold_then_stored(model: Path, config: GenerationConfig) -> list[int]:
    """The prompt's cold greedy tokens; its entry is on disk once this returns."""
    engine = await _engine(model, config)
    try:
        _, cold = await _run(engine, bypass_prefix_cache=True)
        await _run(engine)
    finally:
        await engine.close()
    return cold


# -- through the engine ----------------------------------------------------------------------


async def test_a_tampered_entry_with_its_checksum_recomputed_is_not_served(fixture_models, tmp_path, state):
    config = _config(tmp_path / "cache")
    cold = await _cold_then_stored(fixture_models["llama"], config)
    files = _files(tmp_path / "cache")
    assert files
    for path in files:
        _tamper(path)
    engine = await _engine(fixture_models["llama"], config)
    try:
        cached, tokens = await _run(engine)
        stats = await engine.stats()
        assert cached == 0 and tokens == cold
        assert stats.prefix_disk.corrupt == len(files) and stats.prefix_disk_hits == 0
        assert not any(path.exists() for path in files)
    finally:
        await engine.close()


async def test_an_entry_made_under_another_key_is_not_served(fixture_models, tmp_path, state):
    first, second = tmp_path / "first.key", tmp_path / "second.key"
    first.write_bytes(os.urandom(32))
    second.write_bytes(os.urandom(32))
    cold = await _cold_then_stored(fixture_models["llama"], _config(tmp_path / "cache", first))
    files = _files(tmp_path / "cache")
    assert files
    engine = await _engine(fixture_models["llama"], _config(tmp_path / "cache", second))
    try:
        cached, tokens = await _run(engine)
        assert cached == 0 and tokens == cold
        assert (await engine.stats()).prefix_disk.corrupt == len(files)
    finally:
        await engine.close()
    engine = await _engine(fixture_models["llama"], _config(tmp_path / "cache", second))
    try:  # what the second key wrote serves under it
        cached, tokens = await _run(engine)
        assert cached >= len(PROMPT) // 2 and tokens == cold
    finally:
        await engine.close()


async def test_files_are_private_and_name_no_tenant(fixture_models, tmp_path, state):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    os.chmod(cache, 0o755)  # an existing directory others may read: narrowed at start
    engine = await _engine(fixture_models["llama"], _config(cache))
    try:
        await _run(engine, tenant=Tenant(name="acme-confidential"))
        assert engine.disk.drain(10)
    finally:
        await engine.close()
    files = _files(cache)
    assert files
    for directory in (cache, files[0].parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert b"acme-confidential" not in path.read_bytes()
    key = state / KEY_NAME
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert load_key(None, state, cache) == key.read_bytes()  # made once, reused by every start


# -- the tier on its own -----------------------------------------------------------------------


def _stored(directory: Path, tokens: list[int], fingerprint: str = "fp") -> Path:
    """Writes one entry of ``tokens`` with a tier of its own; returns its file."""
    before = set((directory / fingerprint).glob("*" + SUFFIX))
    tier = DiskTier(directory, 1 << 30, fingerprint, KEY)
    tier.write(to_host(_filled(len(tokens)), "ns", tokens, fingerprint))
    tier.drain(10)
    tier.close()
    (path,) = set((directory / fingerprint).glob("*" + SUFFIX)) - before
    return path


def _in_thread(fn, timeout: float = 30.0):
    """``fn()`` on a thread; (finished, result) after at most ``timeout`` seconds (its exception raised here)."""
    result, errors = [], []

    def run():
        try:
            result.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if errors:
        raise errors[0]
    return not thread.is_alive(), result[0] if result else None


def _unblock(fifos: list[Path]) -> None:
    """Lets a reader stuck on a FIFO go (only the old code's open() ever waits there)."""
    for fifo in fifos:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_planted_links_fifos_directories_and_truncated_files_are_skipped_without_blocking(tmp_path):
    cache = tmp_path / "cache"
    _stored(cache, list(range(12)))
    moved = _stored(cache, list(range(50, 62)))
    truncated = _stored(cache, list(range(70, 82)))
    truncated.write_bytes(truncated.read_bytes()[:-100])
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / moved.name
    os.replace(moved, target)  # a complete entry of this key, reached through a link
    fifo_outside = outside / "fifo"
    os.mkfifo(fifo_outside)
    here = cache / "fp"
    planted = {"fifo": here / ("f" * 40 + SUFFIX), "fifo_temp": here / ("a" * 40 + SUFFIX + ".1.1.tmp"),
               "link_to_fifo": here / ("e" * 40 + SUFFIX), "link_to_entry": here / moved.name,
               "directory": here / ("d" * 40 + SUFFIX)}
    os.mkfifo(planted["fifo"])
    os.mkfifo(planted["fifo_temp"])
    planted["link_to_fifo"].symlink_to(fifo_outside)
    planted["link_to_entry"].symlink_to(target)
    planted["directory"].mkdir()
    try:
        finished, tier = _in_thread(lambda: DiskTier(cache, 1 << 30, "fp", KEY))
        assert finished, "the start blocked on something planted in the directory"
        try:
            assert len(tier) == 1 and tier.find("ns", list(range(20)))[1] == 12
            assert tier.find("ns", list(range(50, 70))) is None and tier.find("ns", list(range(70, 90))) is None
            assert tier.corrupt == 6  # five planted things and the truncated file
            for name in ("fifo", "fifo_temp", "link_to_fifo", "link_to_entry"):
                assert not os.path.lexists(planted[name]), name
            assert not truncated.exists() and target.exists() and fifo_outside.exists()  # links' targets stay
            assert planted["directory"].is_dir()  # never read, never deleted
        finally:
            tier.close()
    finally:
        _unblock([planted["fifo"], planted["fifo_temp"], fifo_outside])


def test_a_fifo_put_in_an_entrys_place_never_blocks_the_reader(tmp_path):
    cache = tmp_path / "cache"
    path = _stored(cache, list(range(12)))
    tier = DiskTier(cache, 1 << 30, "fp", KEY)
    try:
        entry, covered = tier.find("ns", list(range(20)))
        assert covered == 12
        path.unlink()
        os.mkfifo(path)
        try:
            finished, read = _in_thread(lambda: tier.read(entry))
            assert finished, "the reader blocked on a FIFO"
            assert read is None and tier.corrupt == 1 and len(tier) == 0
        finally:
            _unblock([path])
    finally:
        tier.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory needs root")
def test_another_users_directory_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chown(cache, 65534, 65534)
    with pytest.raises(Refused, match="belongs to user 65534"):
        DiskTier(cache, 1 << 30, "fp", KEY)


def test_a_key_inside_the_cache_directory_or_readable_by_others_is_refused(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(Refused, match="inside the cache directory"):
        load_key(None, cache / "state", cache)
    state = tmp_path / "state"
    key = load_key(None, state, cache)
    assert len(key) == 32 and load_key(None, state, cache) == key
    os.chmod(state / KEY_NAME, 0o644)
    with pytest.raises(Refused, match="others may have read it"):
        load_key(None, state, cache)
    short = tmp_path / "short.key"
    short.write_bytes(b"x" * 16)
    with pytest.raises(Refused, match="at least 32"):
        load_key(short, state, cache)
