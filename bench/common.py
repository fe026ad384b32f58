"""Shared pieces: statistics, machine facts, model preparation, prompts."""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import socket
import statistics
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Sequence

import engine  # noqa: F401  - BLAS before mlx
from engine.hardware import blas


# -- statistics -------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]); nan for no values."""
    xs = sorted(values)
    if not xs:
        return math.nan
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


@dataclass
class Sample:
    """Repeated measurements of one figure; shown as median [min-max]."""

    values: list[float] = field(default_factory=list)

    def add(self, v: float) -> None:
        if v is not None and not math.isnan(v):
            self.values.append(v)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    def fmt(self, digits: int = 1, scale: float = 1.0) -> str:
        if not self.values:
            return "n/a"
        f = f"{{:.{digits}f}}"
        med = f.format(self.median * scale)
        if len(self.values) == 1:
            return med
        return f"{med} [{f.format(min(self.values) * scale)}-{f.format(max(self.values) * scale)}]"


def rotated(items: list, rep: int) -> list:
    """``items`` rotated by ``rep``: each side goes first in turn, so drifts in machine
    load hit every side alike."""
    k = rep % len(items)
    return items[k:] + items[:k]


def ratio(a: float, b: float) -> str:
    if not a or not b or math.isnan(a) or math.isnan(b):
        return "n/a"
    return f"{a / b:.2f}x"


# -- machine ------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_isa() -> str:
    """The widest x86 vector extension the CPU has ("AVX-512", "AVX2"), or the machine."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        flags = []
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX")):
        if flag in flags:
            return name + (" VNNI" if flag == "avx512f" and "avx512_vnni" in flags else "")
    return platform.machine()


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def machine_facts() -> dict[str, str]:
    import psutil

    from engine.hardware.device import backend_name

    return {
        "machine": f"{cpu_model()} ({cpu_isa()}), {os.cpu_count()} cores, "
                   f"{psutil.virtual_memory().total / 2**30:.0f} GiB, {platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "mlx / mlx-lm": f"{version('mlx')} / {version('mlx-lm')}",
        "backend": backend_name(),
        "BLAS": blas.describe(),
        "load average at start": "%.2f %.2f %.2f" % os.getloadavg(),
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_low_load(threshold: float, max_wait_s: float, log) -> float:
    """Waits (bounded) until the 1-minute load average drops below ``threshold``."""
    deadline = time.monotonic() + max_wait_s
    load = os.getloadavg()[0]
    while load > threshold and time.monotonic() < deadline:
        log(f"load average {load:.2f} > {threshold}; waiting...")
        time.sleep(10)
        load = os.getloadavg()[0]
    return load


# -- the model ---------------------------------------------------------------------------

def default_model() -> Path:
    from engine.loading.embedded import default_generation_model

    return default_generation_model()


def default_embedding_model() -> Path | None:
    from engine.loading.embedded import EmbeddedModelMissing, default_embedding_model as find

    try:
        return find()
    except EmbeddedModelMissing:
        return None


def prepare_f32(source: str | Path, log) -> Path:
    """A Hugging Face directory with float32 weights for ``source`` (a GGUF file or a
    directory), so mlx-lm, mlx_lm.server and our server load identical weights in the
    same dtype. Written once under the model cache; a directory already in float32
    is used as is."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from engine.loading.model import cache_root, load_generation_model, resolve_artifact

    artifact = resolve_artifact(source)
    if not artifact.is_dir():
        raise SystemExit(f"--model {source}: not a GGUF file or a model directory")
    if _all_f32(artifact):
        return artifact
    target = cache_root() / "bench" / f"{artifact.name}-f32"
    if (target / "model.safetensors").is_file():
        return target
    log(f"writing a float32 copy of {artifact} to {target}")
    # as mlx-lm defines the model: no kernels (they fuse layers), quantized weights dequantized
    loaded = load_generation_model(artifact, dtype="float32", use_kernels=False, dequantize=True)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in artifact.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "model.safetensors.index.json":
            shutil.copy2(f, tmp / f.name)
    config = json.loads((artifact / "config.json").read_text())
    config["torch_dtype"] = "float32"
    config.pop("quantization", None)
    config.pop("quantization_config", None)
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    weights = dict(tree_flatten(loaded.model.parameters()))
    mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "mlx"})
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def _all_f32(directory: Path) -> bool:
    import struct

    files = list(directory.glob("*.safetensors"))
    if not files:
        return False
    for f in files:
        with f.open("rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
        if dtypes != {"F32"}:  # half floats, or packed quantized weights
            return False
    return True


# -- prompts ------------------------------------------------------------------------------

PARAGRAPH = (
    "The history of computing is a story of abstractions stacked on abstractions. "
    "Early machines were programmed by rewiring panels; later, stored programs let the "
    "same hardware run many tasks. Compilers freed programmers from machine code, "
    "operating systems shared one computer among many users, and networks joined "
    "computers into systems larger than any single machine. "
)


def long_prompt_ids(tokenizer, tokens: int, salt: str = "") -> list[int]:
    """About ``tokens`` token ids of English prose (exactly ``tokens`` when long enough)."""
    text = salt
    ids: list[int] = []
    while len(ids) < tokens:
        text += PARAGRAPH
        ids = tokenizer.encode(text)
    return ids[:tokens]


def stream_prompt(i: int) -> str:
    """Distinct short prompts that keep a model talking (counting rarely ends)."""
    start = 17 * i + 3
    return f"Count upward by ones, separated by commas: {start}, {start + 1}, {start + 2},"


SENTENCES = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.", "The new movie is awesome.",
    "The cat sits outside on the mat.", "The new movie is so great, everybody should watch it.",
]


def embedding_texts(n: int, salt: str) -> list[str]:
    """``n`` distinct sentences (distinct per ``salt``: the server caches results)."""
    return [f"{SENTENCES[i % len(SENTENCES)]} (sample {salt}-{i})" for i in range(n)]
