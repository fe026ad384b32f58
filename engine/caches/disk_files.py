"""How the disk tier touches its directory: private directories and regular files only.

Invariants: directories are this user's and 0700 (an existing one of ours is narrowed to
0700; one owned by another user is refused); files are created 0600 with
O_CREAT|O_EXCL|O_NOFOLLOW and opened for reading with O_NOFOLLOW|O_NONBLOCK, then
fstat'ed: a symlink, FIFO, socket, device, directory or another user's file raises
``Foreign`` without blocking and without being read.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("engine.caches.disk")

DIR_MODE = 0o700
FILE_MODE = 0o600
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class Foreign(OSError):
    """Something in the directory the tier did not write: not a regular file of ours."""


class Refused(PermissionError):
    """A directory or key the tier will not use (the message says why and what to do)."""


def private_dir(path: Path) -> Path:
    """``path`` as a directory of this user's with mode 0700, made (with its parents) if missing."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"{path} is not a directory (a symbolic link or a file); the disk tier refuses it")
    if st.st_uid != os.geteuid():
        raise Refused(f"{path} belongs to user {st.st_uid}, not to this server's user {os.geteuid()}: others "
                      f"could plant or read entries there; give the server a directory of its own")
    if stat.S_IMODE(st.st_mode) != DIR_MODE:
        log.warning("prefix cache directory %s had mode %o; narrowed to %o", path, stat.S_IMODE(st.st_mode),
                    DIR_MODE)
        os.chmod(path, DIR_MODE, follow_symlinks=False)
    return path


def check_regular(st: os.stat_result, what: str) -> None:
    """Raises ``Foreign`` unless ``st`` is a regular file of this user's."""
    if not stat.S_ISREG(st.st_mode):
        raise Foreign(f"{what} is not a regular file (mode {stat.filemode(st.st_mode)})")
    if st.st_uid != os.geteuid():
        raise Foreign(f"{what} belongs to user {st.st_uid}, not to this server's user")


def open_regular(path: Path) -> int:
    """A read-only descriptor of ``path``, a regular file of ours (never a symlink's target,
    never blocking on a FIFO); ``Foreign`` otherwise, ``FileNotFoundError`` when gone."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK | _CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: a symbolic link; ENXIO: a socket; EACCES: not ours
        raise Foreign(f"{path.name} cannot be opened as a plain file ({exc.strerror})") from None
    try:
        check_regular(os.fstat(fd), path.name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_private(path: Path) -> int:
    """A write-only descriptor of a new file at ``path`` with mode 0600 (fails if anything is there)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, FILE_MODE)


def is_plain(path: Path) -> bool:
    """Whether ``path`` is a regular file of ours, judged without following or opening it."""
    try:
        check_regular(os.lstat(path), path.name)
    except (Foreign, FileNotFoundError):
        return False
    return True
