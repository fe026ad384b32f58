"""Regenerates the Python protobuf and gRPC modules in ``service/gen`` from ``protos/``.

Invariant: imports are rewritten into the package while descriptors keep their canonical
file names (``mlxgrpc/v1/*.proto``), which reflection shows.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
OUT = ROOT / "service" / "gen"
PACKAGE = "service.gen"
_IMPORT = re.compile(r"^from mlxgrpc\.v1 import ", re.MULTILINE)


def generate(out: Path, package: str = PACKAGE) -> None:
    """Writes the generated package (with ``__init__.py`` files) under ``out``."""
    import grpc_tools
    from grpc_tools import protoc  # a development dependency only

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for path in out.rglob("*.py*"):
        text = path.read_text()
        path.write_text(_IMPORT.sub(f"from {package}.mlxgrpc.v1 import ", text))
    for folder in [out, *[p for p in out.rglob("*") if p.is_dir()]]:
        (folder / "__init__.py").touch()


def _differences(a: Path, b: Path) -> list[str]:
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    diffs = [*cmp.left_only, *cmp.right_only, *cmp.diff_files]
    for name, sub in cmp.subdirs.items():
        diffs += [f"{name}/{d}" for d in _differences(a / name, b / name)]
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the output is stale")
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default service/gen)")
    parser.add_argument("--package", default=PACKAGE, help="Python package of the output folder")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "gen"
        fresh.mkdir()
        generate(fresh, args.package)
        if args.check:
            diffs = _differences(fresh, out) if out.exists() else [f"{out} missing"]
            if diffs:
                again = " ".join(["python -m service.codegen", *(argv or sys.argv[1:])]).replace(" --check", "")
                print(f"generated code in {out} is stale; run {again}:",
                      *diffs, sep="\n  ")
                return 1
            print(f"generated Python code in {out.relative_to(ROOT)} matches protos/")
            return 0
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(fresh, out)
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
