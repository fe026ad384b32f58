"""Which BLAS MLX's CPU backend uses, and loading a fast one (``MLX_GRPC_BLAS``: auto, off, a path).

Invariant: a BLAS exporting unprefixed CBLAS symbols must be loaded RTLD_GLOBAL
before ``import mlx`` (libmlx binds ``cblas_sgemm`` at import); ``engine`` imports
call ``preload()`` first. ``active()`` reports what the linker really resolves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
import sys
import threading
from pathlib import Path

from .blas_linker import BlasInfo, global_blas

__all__ = ["ENV_VAR", "BlasInfo", "preload", "active", "info", "describe", "announce"]

log = logging.getLogger("engine.hardware.blas")

ENV_VAR = "MLX_GRPC_BLAS"
_OFF = {"off", "0", "no", "none", "false", "reference"}


_lock = threading.Lock()
_info: BlasInfo | None = None
_handles: list[ctypes.CDLL] = []  # keep the loaded libraries alive
_announced = False


def preload() -> BlasInfo:
    """Loads the optimized BLAS once; returns what MLX will use (later calls: the first result)."""
    global _info
    with _lock:
        if _info is None:
            _info = _preload()
        return _info


def info() -> BlasInfo:
    """What MLX's CPU matmuls run on (preloading if nobody has yet)."""
    return _info if _info is not None else preload()


def active() -> str:
    """"mkl", "openblas", "reference", "accelerate" (or another library's name)."""
    return info().name


def describe() -> str:
    return info().describe()


def announce() -> None:
    """Logs the BLAS in use once (a reference BLAS on Linux is a WARNING)."""
    global _announced
    if _announced:
        return
    _announced = True
    i = info()
    if i.name == "reference" and sys.platform.startswith("linux") and not _turned_off():
        log.warning("BLAS: MLX's reference BLAS (%s); f32 matmuls are ~40x slower than with "
                    "MKL or OpenBLAS: pip install 'mlx-grpc[blas]' (or mkl), and import engine "
                    "before mlx", i.note or "no optimized BLAS found")
    else:
        log.info("BLAS: %s [%s]", i.describe(), i.source or "default")


def _preload() -> BlasInfo:
    if sys.platform == "darwin":
        return BlasInfo("accelerate", source="mlx on macOS links Accelerate")
    if not sys.platform.startswith("linux"):
        return _global_or_reference("not Linux: nothing preloaded")
    setting = os.environ.get(ENV_VAR, "auto").strip()
    if setting.lower() in _OFF:
        found = global_blas(source=f"{ENV_VAR}={setting}, but LD_PRELOAD")
        return found or BlasInfo("reference", source=f"{ENV_VAR}={setting}")
    mlx_first = "mlx.core" in sys.modules
    if mlx_first:
        # libmlx bound cblas_* at import (RTLD_NOW): a library loaded now changes nothing.
        found = global_blas(source="loaded before mlx (LD_PRELOAD)")
        if found is not None:
            return found
        wanted = setting if setting.lower() != "auto" else _first_candidate_name()
        if wanted:
            log.warning("BLAS: mlx was imported before engine, so %s cannot take over its "
                        "matmuls; MLX keeps its reference BLAS. Import engine (or call "
                        "engine.hardware.blas.preload()) before mlx.", wanted)
        return BlasInfo("reference", source="mlx imported first",
                        note="mlx was imported before engine.hardware.blas.preload()" if wanted else "")
    preloaded = global_blas(source="LD_PRELOAD")
    if preloaded is not None:
        return preloaded
    if setting.lower() == "auto":
        for name, libs, source in _candidates():
            loaded = _try_load(libs, name, source)
            if loaded is not None:
                return loaded
        return BlasInfo("reference", source="auto: no optimized BLAS installed")
    loaded = _try_load([Path(setting)], None, f"{ENV_VAR}={setting}")
    if loaded is None:
        log.error("BLAS: %s=%s could not be used (see above); MLX keeps its reference BLAS",
                  ENV_VAR, setting)
        return BlasInfo("reference", source=f"{ENV_VAR}={setting} failed", note=f"{setting} failed to load")
    return loaded


def _try_load(libs: list[Path], name: str | None, source: str) -> BlasInfo | None:
    """Loads ``libs`` in order with RTLD_GLOBAL; the last must export cblas_sgemm."""
    handles = []
    try:
        for lib in libs:
            handles.append(ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL))
    except OSError as exc:
        (log.debug if name else log.warning)("BLAS: %s not usable: %s", libs[-1], exc)
        return None
    main = handles[-1]
    if not hasattr(main, "cblas_sgemm"):
        log.warning("BLAS: %s exports no cblas_sgemm (prefixed symbols?); not used", libs[-1])
        return None
    _handles.extend(handles)
    found = global_blas(source=source)
    if found is None or (name and found.name != name):
        log.warning("BLAS: loaded %s but cblas_sgemm resolves to %s", libs[-1],
                    found.path if found else "nothing")
    return found


def _candidates() -> list[tuple[str, list[Path], str]]:
    """(name, libraries in load order, source) for ``auto``, best first."""
    out: list[tuple[str, list[Path], str]] = []
    if platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"):
        return out
    mkl = _dist_file("mkl", "libmkl_rt.so")
    if mkl is not None:
        iomp = _dist_file("intel-openmp", "libiomp5.so")
        if iomp is None:  # MKL's default (Intel) threading layer needs libiomp5
            os.environ.setdefault("MKL_THREADING_LAYER", "SEQUENTIAL")
        out.append(("mkl", ([iomp] if iomp else []) + [mkl], "auto: mkl (PyPI)"))
    cmeel = _dist_file("cmeel-openblas", "libopenblas.so")
    if cmeel is not None:
        out.append(("openblas", [cmeel], "auto: cmeel-openblas (PyPI)"))
    system = ctypes.util.find_library("openblas")
    if system:
        out.append(("openblas", [Path(system)], "auto: system OpenBLAS"))
    return out


def _first_candidate_name() -> str:
    c = _candidates()
    return f"{c[0][0]} ({c[0][1][-1]})" if c else ""


def _dist_file(distribution: str, stem: str) -> Path | None:
    """An installed distribution's shortest-named shared library starting with ``stem``."""
    from importlib import metadata  # only when preloading

    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        return None
    names = sorted((f for f in files if Path(str(f)).name.startswith(stem)),
                   key=lambda f: len(str(f)))
    for f in names:
        path = Path(f.locate()).resolve() if not Path(str(f)).is_absolute() else Path(str(f))
        if path.is_file():
            return path
    return None


def _turned_off() -> bool:
    return os.environ.get(ENV_VAR, "auto").strip().lower() in _OFF


def _global_or_reference(note: str) -> BlasInfo:
    return global_blas(source="global") or BlasInfo("reference", note=note)
