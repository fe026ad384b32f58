"""What the dynamic linker resolves ``cblas_sgemm`` to, and which BLAS that is (what MLX binds to)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass

__all__ = ["BlasInfo", "global_blas"]


@dataclass(frozen=True)
class BlasInfo:
    name: str  # "mkl", "openblas", "blis", "reference", "accelerate" or a library's file name
    path: str = ""  # the library cblas_sgemm resolves to ("" for the bundled reference)
    version: str = ""
    threads: int = 0  # 0: unknown
    source: str = ""  # how it came: "auto: mkl (PyPI)", "MLX_GRPC_BLAS", "LD_PRELOAD", ...
    note: str = ""  # why the reference BLAS is in use, when that is worth saying

    def describe(self) -> str:
        parts = [self.name + (f" {self.version}" if self.version else "")]
        extra = []
        if self.threads:
            extra.append(f"{self.threads} threads")
        if self.path:
            extra.append(self.path)
        if self.note:
            extra.append(self.note)
        return parts[0] + (f" ({', '.join(extra)})" if extra else "")


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _dladdr():
    for lib in (None, ctypes.util.find_library("dl")):
        try:
            fn = ctypes.CDLL(lib).dladdr
        except (OSError, AttributeError, TypeError):
            continue
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        fn.restype = ctypes.c_int
        return fn
    return None


def global_blas(source: str) -> BlasInfo | None:
    """The library ``cblas_sgemm`` resolves to in the global scope; None if none there."""
    try:
        glob = ctypes.CDLL(None)
        fn = glob.cblas_sgemm
    except (OSError, AttributeError):
        return None
    path = ""
    dladdr = _dladdr()
    if dladdr is not None:
        info_ = _DlInfo()
        if dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info_)) and info_.dli_fname:
            path = os.path.realpath(info_.dli_fname.decode(errors="replace"))
    name = _classify(path, glob)
    return BlasInfo(name, path, *_version_threads(name, glob), source=source)


def _classify(path: str, glob: ctypes.CDLL) -> str:
    base = os.path.basename(path).lower()
    if "mkl" in base or hasattr(glob, "mkl_get_version_string") and not base:
        return "mkl"
    if "openblas" in base or (not base and hasattr(glob, "openblas_get_config")):
        return "openblas"
    if "blis" in base:
        return "blis"
    if base.startswith(("libblas", "libcblas")):
        return "reference"
    return base or "unknown"


def _version_threads(name: str, glob: ctypes.CDLL) -> tuple[str, int]:
    version, threads = "", 0
    try:
        if name == "openblas":
            f = glob.openblas_get_config
            f.restype = ctypes.c_char_p
            config = (f() or b"").decode(errors="replace").split()
            version = config[1] if len(config) > 1 and config[0] == "OpenBLAS" else ""
            t = glob.openblas_get_num_threads
            t.restype = ctypes.c_int
            threads = int(t())
        elif name == "mkl":
            buf = ctypes.create_string_buffer(256)
            glob.mkl_get_version_string(buf, 256)
            text = buf.value.decode(errors="replace")
            words = text.replace(",", " ").split()
            version = next((w for w in words if w[:1].isdigit() and "." in w), "").split("-")[0]
            t = glob.MKL_Get_Max_Threads
            t.restype = ctypes.c_int
            threads = int(t())
    except (AttributeError, OSError, ValueError):
        pass
    return version, threads
