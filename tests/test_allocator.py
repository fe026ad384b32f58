"""glibc keeps freed forward temporaries for reuse (engine/hardware/allocator.py): each check
runs in a fresh process, where the setting is applied at ``import engine``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

# A forward's pattern, from a thread other than the main one (as the engine threads do): four
# 12 MiB temporaries allocated, touched and freed, three rounds; prints the minor page faults
# of the later rounds.
_PROBE = r"""
import ctypes, ctypes.util, json, resource, threading
import engine
from engine.hardware import allocator
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
size, faults = 12 << 20, []
def rounds():
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        blocks = [libc.malloc(size) for _ in range(4)]
        for p in blocks:
            libc.memset(p, 1, size)
        for p in blocks:
            libc.free(p)
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
t = threading.Thread(target=rounds); t.start(); t.join()
print(json.dumps({"retained": allocator.retain_freed_memory(), "faults": faults[1:]}))
"""


def _probe(value: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MLX_GRPC_MALLOC_RETAIN"}
    if value is not None:
        env["MLX_GRPC_MALLOC_RETAIN"] = value
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_temporaries_are_reused_without_page_faults():
    got = _probe(None)
    assert got["retained"] == 512 << 20
    pages = 4 * (12 << 20) // 4096
    assert max(got["faults"]) < pages // 20, got  # reused: the pages stay mapped


def test_zero_leaves_glibc_defaults_and_the_faults_come_back():
    got = _probe("0")
    assert got["retained"] == 0
    pages = 4 * (12 << 20) // 4096
    assert min(got["faults"]) > pages // 4, got  # given back and faulted in again every round


def test_a_bad_value_keeps_the_defaults():
    assert _probe("lots")["retained"] == 0
    assert _probe("64")["retained"] == 64 << 20
