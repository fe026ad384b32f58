"""glibc's malloc kept from returning freed memory to the system between forwards
(``MLX_GRPC_MALLOC_RETAIN``: MiB of freed memory a process may keep, default 512; 0 leaves
glibc's defaults).

Invariant: with the defaults, every large temporary of a forward is a fresh mapping that
faults in page by page and is unmapped when freed, and the engine threads' arenas trim theirs
alike; here every thread shares the main heap, an allocation below 32 MiB comes from it, and
up to the retained amount stays there for the next forward. Larger ones (KV caches, weights)
are still mapped and unmapped as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

__all__ = ["ENV_VAR", "release_freed_memory", "retain_freed_memory"]

log = logging.getLogger("engine.hardware.allocator")

ENV_VAR = "MLX_GRPC_MALLOC_RETAIN"
DEFAULT_MIB = 512
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit systems
_applied: int | None = None


def retain_freed_memory() -> int:
    """Applies the setting once per process; the bytes that may stay retained (0: not applied)."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = 0
    raw = os.environ.get(ENV_VAR, str(DEFAULT_MIB)).strip()
    try:
        mib = int(raw)
    except ValueError:
        log.warning("%s=%r is not a whole number of MiB; glibc's defaults kept", ENV_VAR, raw)
        return 0
    name = ctypes.util.find_library("c")
    if mib <= 0 or name is None:
        return 0
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return 0
    if (mallopt(_M_ARENA_MAX, 1) and mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
            and mallopt(_M_TRIM_THRESHOLD, mib << 20)):
        _applied = mib << 20
    return _applied


def release_freed_memory() -> bool:
    """Gives the heap's freed memory back to the system now (glibc's ``malloc_trim``), as after a
    model unloads; False where the C library has no such call."""
    name = ctypes.util.find_library("c")
    try:
        return bool(name and ctypes.CDLL(name).malloc_trim(0))
    except (OSError, AttributeError):  # not glibc
        return False
