"""Builds the CPU kernels, ``engine/kernels/_ext*.so``, against the installed mlx.

    python -m engine.kernels.build            # what scripts/setup.sh runs
    python -m engine.kernels.build --force    # rebuild from scratch
    MLX_GRPC_KERNELS_ARCH=x86-64-v3 python -m engine.kernels.build   # another -march

Needs CMake >= 3.24, a C++17 compiler and nanobind (the ``kernels`` extra). An
extension has to be compiled against the very mlx it runs with, so it is built in
place after mlx is installed rather than shipped prebuilt; a stamp next to it
records the mlx version and a hash of the sources, and the loader refuses a build
that no longer matches either.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_DIR = HERE / "build"
STAMP = HERE / "_ext.stamp.json"
ARCH_VAR = "MLX_GRPC_KERNELS_ARCH"


def sources_hash() -> str:
    """A hash of everything the module is compiled from."""
    h = hashlib.sha256()
    for path in sorted([HERE / "CMakeLists.txt", *(HERE / "csrc").glob("*")]):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def mlx_version() -> str:
    return metadata.version("mlx")


def expected_stamp(arch: str) -> dict:
    return {"mlx": mlx_version(), "sources": sources_hash(), "arch": arch}


def read_stamp() -> dict | None:
    try:
        return json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return None


def stale_reason() -> str | None:
    """Why the built module cannot be used as is, or None when it matches."""
    stamp = read_stamp()
    if stamp is None or not list(HERE.glob("_ext*.so")):
        return "not built"
    if stamp.get("mlx") != mlx_version():
        return f"built for mlx {stamp.get('mlx')}, mlx {mlx_version()} is installed"
    if stamp.get("sources") != sources_hash():
        return "the sources changed since it was built"
    return None


def build(force: bool = False, arch: str | None = None, jobs: int | None = None) -> Path:
    """Configures and compiles the module (incrementally unless ``force``);
    returns its path. Raises RuntimeError with the reason when it cannot."""
    arch = arch or os.environ.get(ARCH_VAR) or "native"
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("cmake not found (install CMake >= 3.24)")
    if force:
        shutil.rmtree(BUILD_DIR, ignore_errors=True)
    STAMP.unlink(missing_ok=True)
    configure = [cmake, "-S", str(HERE), "-B", str(BUILD_DIR), "-DCMAKE_BUILD_TYPE=Release",
                 f"-DPython_EXECUTABLE={sys.executable}", f"-DKERNELS_ARCH={arch}"]
    compile_ = [cmake, "--build", str(BUILD_DIR), "-j", str(jobs or os.cpu_count() or 1)]
    for command in (configure, compile_):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:3])} failed:\n{(done.stdout + done.stderr)[-4000:]}")
    built = sorted(HERE.glob("_ext*.so"))
    if not built:
        raise RuntimeError("the build finished without producing engine/kernels/_ext*.so")
    STAMP.write_text(json.dumps(expected_stamp(arch), indent=2) + "\n")
    return built[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.kernels.build", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--force", action="store_true", help="rebuild from scratch")
    p.add_argument("--arch", help=f"-march value (default: ${ARCH_VAR} or native)")
    p.add_argument("--check", action="store_true", help="only say whether the build is current")
    args = p.parse_args(argv)
    if args.check:
        reason = stale_reason()
        print(reason or "current")
        return 1 if reason else 0
    try:
        path = build(force=args.force, arch=args.arch)
    except RuntimeError as exc:
        print(f"CPU kernels not built: {exc}", file=sys.stderr)
        return 1
    # Prove the module loads and agrees with mlx, in a fresh interpreter.
    check = subprocess.run([sys.executable, "-c", "import engine.kernels as k; s = k.status(); "
                            "print(s.describe()); raise SystemExit(0 if s.available else 1)"],
                           cwd=HERE.parent.parent, capture_output=True, text=True)
    print(f"built {path.name}: {check.stdout.strip() or check.stderr.strip()[-2000:]}")
    return check.returncode


if __name__ == "__main__":
    sys.exit(main())
