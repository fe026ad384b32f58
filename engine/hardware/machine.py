"""What this machine gives the process: usable memory (cgroup, Metal, RAM), read
bandwidth (measured, cached per size), and mlx's allocator-cache limit (read unchanged).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import threading
import time

import mlx.core as mx
import psutil

__all__ = ["MIB", "allocator_cache_limit", "measure_matvec_bandwidth", "measure_read_bandwidth", "usable_memory"]

MIB = 1 << 20


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _cgroup_mounts() -> tuple[str | None, str | None]:
    """Mount points of the cgroup v2 hierarchy and the v1 memory controller."""
    v2 = v1 = None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if " - " not in line:
                    continue
                sep = parts.index("-")
                fstype, options = parts[sep + 1], parts[-1]
                if fstype == "cgroup2" and v2 is None:
                    v2 = parts[4]
                elif fstype == "cgroup" and "memory" in options.split(",") and v1 is None:
                    v1 = parts[4]
    except OSError:
        pass
    return v2, v1


def _cgroup_dirs(mount: str, rel: str) -> list[str]:
    """The process's cgroup directory and its ancestors under ``mount`` (limits are hierarchical)."""
    dirs = []
    rel = rel.strip("/")
    while True:
        path = os.path.join(mount, rel) if rel else mount
        if os.path.isdir(path):
            dirs.append(path)
        if not rel:
            return dirs
        rel = os.path.dirname(rel)


def _cgroup_memory(proc_cgroup: str = "/proc/self/cgroup",
                   mounts: tuple[str | None, str | None] | None = None) -> tuple[int | None, int | None]:
    """(limit, bytes the cgroup holds that cannot be reclaimed), or Nones."""
    if not sys.platform.startswith("linux"):
        return None, None
    v2_rel = v1_rel = None
    try:
        with open(proc_cgroup, encoding="utf-8") as f:
            for line in f:
                hid, controllers, path = line.rstrip("\n").split(":", 2)
                if hid == "0" and controllers == "":
                    v2_rel = path
                elif "memory" in controllers.split(","):
                    v1_rel = path
    except (OSError, ValueError):
        return None, None
    v2_mount, v1_mount = _cgroup_mounts() if mounts is None else mounts
    best: tuple[int, str, str, str] | None = None  # (limit, dir, usage file, stat key)
    candidates: list[tuple[str, str, str, str]] = []
    if v2_mount and v2_rel is not None:
        candidates += [(d, "memory.max", "memory.current", "inactive_file") for d in _cgroup_dirs(v2_mount, v2_rel)]
    if v1_mount and v1_rel is not None:
        candidates += [(d, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
                       for d in _cgroup_dirs(v1_mount, v1_rel)]
    for directory, limit_file, usage_file, stat_key in candidates:
        limit = _read_int(os.path.join(directory, limit_file))
        if limit is None or limit >= 1 << 60:  # v1 "unlimited" is a page-rounded 2**63
            continue
        if best is None or limit < best[0]:
            best = (limit, directory, usage_file, stat_key)
    if best is None:
        return None, None
    limit, directory, usage_file, stat_key = best
    usage = _read_int(os.path.join(directory, usage_file))
    if usage is None:
        return limit, None
    inactive = 0
    try:
        with open(os.path.join(directory, "memory.stat"), encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == stat_key:
                    inactive = int(value)
    except (OSError, ValueError):
        pass
    return limit, max(0, usage - inactive)


def _metal_working_set() -> int | None:
    try:
        if not mx.metal.is_available():
            return None
        info = mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info()
        size = int(info["max_recommended_working_set_size"])
        return size if size > 0 else None
    except Exception:  # noqa: BLE001 - older mlx, other backends
        return None


def usable_memory() -> tuple[int, int]:
    """(usable_bytes, limit_bytes): what this process may use now, and the most it could get.

    ``limit`` = min(RAM, cgroup limit, Metal working set); ``usable = min(limit,
    available + own RSS)``: own RSS is added back because a plan counts the weights itself.
    """
    vm = psutil.virtual_memory()
    limit = int(vm.total)
    metal = _metal_working_set()
    if metal is not None:
        limit = min(limit, metal)
    rss = int(psutil.Process().memory_info().rss)
    usable = int(vm.available) + rss
    cg_limit, cg_used = _cgroup_memory()
    if cg_limit is not None:
        limit = min(limit, cg_limit)
        if cg_used is not None:
            usable = min(usable, cg_limit - cg_used + rss)
    return max(0, min(limit, usable)), limit


@functools.lru_cache(maxsize=8)
def measure_read_bandwidth(nbytes: int = 256 * MIB) -> float:
    """Bytes per second an ``mx.sum`` over ``nbytes`` reads (best of five; cached per size)."""
    n = max(1, nbytes // 4)
    data = mx.random.uniform(shape=(n,), dtype=mx.float32)
    mx.eval(data)
    mx.eval(mx.sum(data))  # warm-up: kernels, page faults
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        mx.eval(mx.sum(data))
        best = min(best, time.perf_counter() - start)
    del data
    mx.clear_cache()
    return (n * 4) / best if best > 0 else 0.0


@functools.lru_cache(maxsize=8)
def measure_matvec_bandwidth(nbytes: int = 256 * MIB, k: int = 4096) -> float:
    """Bytes per second a [1, k] x [k, n] float32 matvec (decode's access pattern) reads; cached per size."""
    weights = mx.ones((max(1, nbytes // 4 // k), k), dtype=mx.float32)
    x = mx.ones((1, k), dtype=mx.float32)
    mx.eval(weights, x)
    mx.eval(x @ weights.T)  # warm-up: kernels, page faults
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        mx.eval(x @ weights.T)
        best = min(best, time.perf_counter() - start)
    read = weights.nbytes
    del weights
    mx.clear_cache()
    return read / best if best > 0 else 0.0


_cache_limit_lock = threading.Lock()


def allocator_cache_limit() -> int | None:
    """mlx's allocator-cache limit, or None; read by raising it for an instant and restoring it."""

    try:
        with _cache_limit_lock:
            previous = mx.set_cache_limit(1 << 62)
            mx.set_cache_limit(previous)
        return int(previous)
    except Exception:  # noqa: BLE001
        return None
