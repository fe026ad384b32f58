"""The anchors' side of ``python -m bench.embeddings``: sentence-transformers on torch and on
ONNX Runtime (float32, and the same model quantized to int8 by ONNX Runtime's dynamic quantizer
for this CPU's instructions), run by the anchors' own Python (never this project's environment).

    python -m bench.embeddings --setup-anchors DIR    # a venv with torch, sentence-transformers[onnx]

Protocol (one JSON object per line): the first line on stdin names the model directory and
the batch size; each later line ``{"backend": ..., "texts": [...], "out": PATH}`` is answered
with ``{"rate": inputs per second}`` after the vectors (L2-normalized, float32) are saved
to PATH as .npy. Both backends are loaded and warmed before the first answer.
"""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PACKAGES = ["torch", "sentence-transformers[onnx]>=5,<6"]
BACKENDS = ("torch", "onnx", "onnx-int8")
QUANTIZED: dict[str, str] = {}  # the int8 model's quantization config, for the report


def _models(model_dir: Path, threads: int) -> dict:
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    # The ONNX export writes into the model folder: a copy, so the model's own stays untouched.
    work = Path(tempfile.mkdtemp(prefix="embed-anchor-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    shutil.copytree(model_dir, work / "model")
    models = {"torch": SentenceTransformer(str(model_dir), device="cpu", backend="torch"),
              "onnx": SentenceTransformer(str(work / "model"), device="cpu", backend="onnx",
                                          model_kwargs={"provider": "CPUExecutionProvider"})}
    models["onnx-int8"] = _quantized(models["onnx"], work / "model")
    for model in models.values():
        model.encode(["warm-up"] * 32, batch_size=32)
    return models


def _quantized(onnx_model, folder: Path):
    """The ONNX model quantized to int8 by ONNX Runtime's dynamic quantizer (through
    sentence-transformers), configured for AVX-512 VNNI where the CPU has it, else AVX2."""
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    config = "avx512_vnni" if " avx512_vnni" in flags else "avx2"
    export_dynamic_quantized_onnx_model(onnx_model, config, str(folder))
    written = next((folder / "onnx").glob(f"model_*int8_{config}.onnx"))  # qint8 or quint8, as the config says
    QUANTIZED["onnx_int8"] = written.stem.removeprefix("model_")
    return SentenceTransformer(str(folder), device="cpu", backend="onnx",
                               model_kwargs={"provider": "CPUExecutionProvider",
                                             "file_name": f"onnx/{written.name}"})


# -- the bench's end (this project's Python) ----------------------------------------------

def setup_anchors(venv: Path) -> Path:
    """A virtual environment at ``venv`` with the anchors installed; its Python."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--upgrade", *PACKAGES], check=True)
    return python


class AnchorProcess:
    """The anchors' worker, started with their Python; one job at a time."""

    def __init__(self, python: Path, model_dir: Path, batch_size: int = 32, threads: int = 2):
        # -P: not the bench folder first on sys.path (its profile.py would shadow the standard one)
        self.proc = subprocess.Popen([str(python), "-P", __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self._send({"model": str(model_dir), "batch_size": batch_size, "threads": threads})
        self.facts = self._read()["ready"]
        self.dir = Path(tempfile.mkdtemp(prefix="embed-anchor-out-"))

    def _send(self, obj: dict) -> None:
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the anchor worker exited ({self.proc.wait()}); its error is above")
        return json.loads(line)

    def encode(self, backend: str, texts: list[str]):
        """(inputs per second, normalized vectors)."""
        import numpy as np

        out = self.dir / "vectors.npy"
        self._send({"backend": backend, "texts": texts, "out": str(out)})
        rate = self._read()["rate"]
        return rate, np.load(out)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the worker's end (the anchors' Python) ----------------------------------------------

def main() -> None:
    import numpy as np
    import torch

    setup = json.loads(sys.stdin.readline())
    models = _models(Path(setup["model"]), int(setup.get("threads", 2)))
    facts = {"torch": torch.__version__, "threads": torch.get_num_threads(), **QUANTIZED}
    try:
        import onnxruntime
        import sentence_transformers

        facts.update(onnxruntime=onnxruntime.__version__, sentence_transformers=sentence_transformers.__version__)
    except ImportError:
        pass
    print(json.dumps({"ready": facts}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        model = models[job["backend"]]
        start = time.perf_counter()
        vectors = model.encode(job["texts"], batch_size=int(setup["batch_size"]),
                               normalize_embeddings=True, convert_to_numpy=True)
        rate = len(job["texts"]) / (time.perf_counter() - start)
        np.save(job["out"], vectors.astype(np.float32))
        print(json.dumps({"rate": rate}), flush=True)


if __name__ == "__main__":
    main()
