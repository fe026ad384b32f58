"""The disk tier's secret key and what it is used for: every entry's MACs, its file name and
its namespace tag (a keyed hash, so a file names no tenant).

Invariants: the key lives outside the cache directory (one inside is refused); it is the
operator's file (``--prefix-cache-key-file``, at least 32 bytes) or one generated once as
``<state dir>/prefix-cache.key`` (32 random bytes, created 0600 with O_EXCL under a
temporary name and linked into place, so concurrent starts agree on one key); a generated
key another user owns, or others may read, is refused, never used.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import stat
from pathlib import Path
from typing import Sequence

from .disk_files import Refused, create_private, private_dir

log = logging.getLogger("engine.caches.disk")

KEY_NAME = "prefix-cache.key"
MIN_KEY_BYTES = 32


def load_key(key_file: str | Path | None, state_dir: Path, cache_dir: str | Path) -> bytes:
    """The tier's key: ``key_file``'s bytes, or the state directory's generated key."""
    path = Path(key_file).expanduser() if key_file else Path(state_dir).expanduser().resolve() / KEY_NAME
    cache = Path(cache_dir).expanduser().resolve()
    where = path.resolve()
    if where == cache or cache in where.parents:
        raise Refused(f"the prefix cache key {where} lies inside the cache directory {cache}, where whoever can "
                      f"write entries could read it: keep it elsewhere (--prefix-cache-key-file)")
    return _read_operators(path) if key_file else _generated(path)


def _read_operators(path: Path) -> bytes:
    """The operator's key file (symbolic links followed: secret mounts use them)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"the prefix cache key file {path} is not a regular file")
    key = path.read_bytes()
    if len(key) < MIN_KEY_BYTES:
        raise Refused(f"the prefix cache key file {path} holds {len(key)} bytes; it needs at least "
                      f"{MIN_KEY_BYTES} random bytes (head -c 32 /dev/urandom > FILE)")
    if stat.S_IMODE(st.st_mode) & 0o077:
        log.warning("the prefix cache key file %s may be read by other users (mode %o)", path,
                    stat.S_IMODE(st.st_mode))
    return key


def _generated(path: Path) -> bytes:
    private_dir(path.parent)
    try:
        return _read_own(path)
    except FileNotFoundError:
        pass
    temp = path.with_name(f"{path.name}.{os.getpid()}.new")
    fd = create_private(temp)
    try:
        os.write(fd, os.urandom(MIN_KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, path)  # fails if another start linked its key first: then that one is used
        log.info("generated the prefix cache key %s", path)
    except FileExistsError:
        pass
    finally:
        os.unlink(temp)
    return _read_own(path)


def _read_own(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Refused(f"the prefix cache key {path} cannot be opened as a plain file ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or mode & 0o077:
            raise Refused(f"the prefix cache key {path} is not a private file of this user's (mode {mode:o}, "
                          f"owner {st.st_uid}); others may have read it: delete it (a new key is made, and the "
                          f"entries made under the old one are dropped) or name one with --prefix-cache-key-file")
        key = os.read(fd, 4096)
    finally:
        os.close(fd)
    if len(key) < MIN_KEY_BYTES:
        raise Refused(f"the prefix cache key {path} holds {len(key)} bytes, not {MIN_KEY_BYTES}: delete it")
    return key


def keyed(key: bytes, purpose: bytes, *parts: bytes) -> hmac.HMAC:
    """HMAC-SHA-256 under ``key`` of ``purpose`` and ``parts`` (domain-separated)."""
    mac = hmac.new(key, purpose + b"\x00", hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "little") + part)
    return mac


def namespace_tag(key: bytes, namespace: str) -> str:
    """What files and the index hold instead of a namespace (model, tenant, adapter)."""
    return keyed(key, b"namespace", namespace.encode()).hexdigest()[:32]


def entry_name(key: bytes, tag: str, tokens: Sequence[int]) -> str:
    """The file name (less its suffix) of the entry of ``tokens`` under namespace tag ``tag``."""
    return keyed(key, b"entry", tag.encode(), json.dumps(list(tokens)).encode()).hexdigest()[:40]
