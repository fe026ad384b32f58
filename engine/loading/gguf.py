"""Convert a GGUF file into a Hugging Face-layout directory that ``mlx_lm.load()`` reads offline.

Invariants: quantized blocks become MLX affine triplets holding the file's own bits (stacked
3-D expert tensors too: blocks and MLX groups both run along the last axis);
the converter's own transforms are undone (llama/granite q/k rows back in HF order, Gemma's
norm + 1 taken off); a directory is never seen half-written.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import mlx.core as mx
import numpy as np

from ..caches.fingerprint import WeightDigests
from ..errors import UnsupportedModel
from .gguf_arch import architecture, permute_qk, unpermute_qk
from .gguf_blocks import UnsupportedTensorType, supported_types, to_affine
from .gguf_config import CONFIG_TENSORS, build_config
from .gguf_file import GGUFFile, GGUFTensor, read_gguf
from .gguf_names import tensor_names
from .gguf_tokenizer import GGUFVocab, build_tokenizer, special_tokens_map, tokenizer_config

__all__ = ["convert_gguf", "prepare_gguf", "gguf_fingerprint", "permute_qk", "unpermute_qk", "build_config",
           "served_tensor_names"]

logger = logging.getLogger("engine.loading.gguf")

Progress = Callable[[str, float], None]

MANIFEST_NAME = "gguf_source.json"
# Bump when the output layout changes so that cached conversions are redone; the converter's
# own source is part of every fingerprint too, so a changed converter never reuses one.
CONVERTER_VERSION = 3
_CONVERTER_FILES = ("gguf.py", "gguf_arch.py", "gguf_blocks.py", "gguf_config.py", "gguf_file.py", "gguf_names.py",
                    "gguf_spm.py", "gguf_tokenizer.py")
_GROUP_SIZE = 32  # the MLX group every GGUF block type maps onto
_FLOAT_TYPES = {"F32": np.float32, "F16": np.float16}


@functools.lru_cache(maxsize=1)
def converter_digest() -> bytes:
    """SHA-256 of the converter's version and source files."""
    digest = hashlib.sha256(f"v{CONVERTER_VERSION}".encode())
    for name in _CONVERTER_FILES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.digest()


def gguf_fingerprint(gguf_path: Path, state_dir: Path | None = None) -> str:
    """A short content fingerprint: the whole file's SHA-256 and the converter. The file's digest
    is kept in ``state_dir`` by the file's identity, so an unchanged file is hashed once."""
    digests = WeightDigests(state_dir)
    digest = hashlib.sha256(converter_digest())
    digest.update(bytes.fromhex(digests.of(Path(gguf_path))))
    digests.save()
    return digest.hexdigest()[:12]


def convert_weights(file: GGUFFile, config: Mapping[str, Any], progress: Progress) -> dict[str, mx.array]:
    """GGUF tensors -> Hugging Face named tensors (quantized ones as affine triplets)."""
    arch = architecture(file.metadata)
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    n_layers = config["num_hidden_layers"]
    names = served_tensor_names(file, config)
    if not arch.tested:
        logger.warning("GGUF architecture %r: names and config derived from gguf's and mlx-lm's tables; "
                       "not checked token for token by this server's tests", arch.name)
    out: dict[str, mx.array] = {}
    for tensor in sorted(file.tensors, key=_layer_then_name):
        if tensor.name in CONFIG_TENSORS:
            continue
        kind = tensor.base.rsplit(".", 1)[-1]
        hf = names[tensor.name].rsplit(".", 1)[0]
        for part, array in _arrays(tensor).items():
            if arch.permuted_qk and kind in heads:  # a row permutation: packed weights, scales, biases alike
                array = unpermute_qk(array, heads[kind])
            if arch.norm_shift and kind.endswith("norm"):
                if array.ndim != 1 or part != "weight":
                    raise UnsupportedModel(f"GGUF tensor {tensor.name!r}: a quantized norm is not served")
                array = array - np.float32(arch.norm_shift)
            out[f"{hf}.{tensor.suffix}" if part == "weight" else f"{hf}.{part}"] = mx.array(array)
        if kind in ("ffn_up", "ffn_up_exps") or tensor.base == "token_embd":
            layer = int(tensor.base.split(".")[1]) + 1 if tensor.base.startswith("blk.") else 0
            progress("weights", layer / n_layers)
    return out


def served_tensor_names(file: GGUFFile, config: Mapping[str, Any]) -> dict[str, str]:
    """GGUF tensor name -> the name mlx-lm's model holds it under (the file's config tensors aside)."""
    shapes = {t.name: t.shape for t in file.tensors if t.name not in CONFIG_TENSORS}
    return tensor_names(file.architecture, config, shapes)


def _check_types(file: GGUFFile) -> None:
    """A tensor type this converter cannot read is refused by name before anything else."""
    served = {*supported_types(), *_FLOAT_TYPES, "BF16"}
    for tensor in file.tensors:
        if tensor.type_name not in served:
            raise UnsupportedModel(f"GGML tensor type {tensor.type_name} (tensor {tensor.name!r}) is not served; "
                                   f"served: {', '.join(supported_types())}, F32, F16, BF16")


def _arrays(tensor: GGUFTensor) -> dict[str, np.ndarray]:
    """``weight`` alone (float; BF16 as float32), or quantized ``weight``/``scales``/``biases``."""
    if tensor.type_name in _FLOAT_TYPES:
        return {"weight": np.asarray(tensor.data, dtype=_FLOAT_TYPES[tensor.type_name]).reshape(tensor.shape)}
    if tensor.type_name == "BF16":
        bits = np.asarray(tensor.data).view(np.uint16).astype(np.uint32) << 16
        return {"weight": bits.view(np.float32).reshape(tensor.shape)}
    if len(tensor.shape) not in (2, 3):
        raise UnsupportedModel(f"GGUF tensor {tensor.name!r}: a {tensor.type_name} tensor of "
                               f"{len(tensor.shape)} dimensions is not served")
    *lead, cols = tensor.shape  # 3-D (stacked experts): blocks run along the last axis, as MLX's groups do
    rows = int(np.prod(lead))
    try:
        affine = to_affine(tensor.data, tensor.qtype, rows, cols, tensor.name)
    except UnsupportedTensorType as exc:
        raise UnsupportedModel(str(exc)) from exc
    parts = {"weight": affine.weight, "scales": _compact(affine.scales), "biases": _compact(affine.biases)}
    return {part: array.reshape(*lead, -1) for part, array in parts.items()}


def _compact(values: np.ndarray) -> np.ndarray:
    half = values.astype(np.float16)
    return half if np.array_equal(half.astype(np.float32), values) else values


def _layer_then_name(tensor: GGUFTensor) -> tuple[int, str]:
    parts = tensor.name.split(".")
    return (int(parts[1]) if parts[0] == "blk" else -1, tensor.name)


def _rope_freqs(file: GGUFFile) -> np.ndarray | None:
    for tensor in file.tensors:
        if tensor.name == "rope_freqs.weight":
            return np.asarray(tensor.data, dtype=np.float32).reshape(-1)
    return None


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_model_dir(gguf_path: Path, target: Path, progress: Progress) -> None:
    progress("reading", 0.0)
    file = read_gguf(gguf_path)
    _check_types(file)
    config = build_config(file.metadata, {t.name for t in file.tensors}, _rope_freqs(file))
    if any(t.type_name not in _FLOAT_TYPES and t.type_name != "BF16" for t in file.tensors):
        config["quantization"] = {"group_size": _GROUP_SIZE, "bits": 4}  # real bits per layer: from the shapes
    vocab = GGUFVocab.from_metadata(file.metadata)
    progress("tokenizer", 0.0)
    build_tokenizer(vocab).save(str(target / "tokenizer.json"))
    _write_json(target / "tokenizer_config.json", tokenizer_config(vocab, config["max_position_embeddings"]))
    _write_json(target / "special_tokens_map.json", special_tokens_map(vocab))
    _write_json(target / "config.json", config)
    _write_json(target / "generation_config.json", {
        "bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
    })
    weights = convert_weights(file, config, progress)
    progress("writing", 0.0)
    mx.save_safetensors(str(target / "model.safetensors"), weights, metadata={"format": "pt"})


def _manifest(gguf_path: Path, fingerprint: str) -> dict[str, Any]:
    stat = gguf_path.stat()
    return {
        "converter_version": CONVERTER_VERSION,
        "source": str(gguf_path.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "fingerprint": fingerprint,
    }


def is_up_to_date(out_dir: Path, fingerprint: str) -> bool:
    """Whether ``out_dir`` holds a finished conversion of the file with ``fingerprint``."""
    try:
        manifest = json.loads((out_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return manifest.get("fingerprint") == fingerprint and (out_dir / "model.safetensors").is_file()


def _log_progress(stage: str, fraction: float) -> None:
    level = logging.INFO if fraction in (0.0, 1.0) else logging.DEBUG
    logger.log(level, "GGUF conversion: %s %3.0f%%", stage, 100 * fraction)


def convert_gguf(gguf_path: Path, out_dir: Path, *, progress: Progress | None = None) -> Path:
    """Convert ``gguf_path`` into ``out_dir`` (atomically, by rename) unless already done; return it."""
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    fingerprint = gguf_fingerprint(gguf_path, out_dir.parent)
    if is_up_to_date(out_dir, fingerprint):
        return out_dir
    progress = progress or _log_progress
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary directory
    try:
        _write_model_dir(gguf_path, tmp, progress)
        _write_json(tmp / MANIFEST_NAME, _manifest(gguf_path, fingerprint))
        _replace_dir(tmp, out_dir, fingerprint)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress("done", 1.0)
    return out_dir


def _replace_dir(new: Path, out_dir: Path, fingerprint: str) -> None:
    """Move ``new`` to ``out_dir``, replacing a stale one; a concurrent finished conversion is kept."""

    if out_dir.exists():
        if is_up_to_date(out_dir, fingerprint):
            return
        stale = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.replace(out_dir, stale / out_dir.name)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.replace(new, out_dir)
    except OSError:
        if not is_up_to_date(out_dir, fingerprint):  # lost a race to a concurrent writer
            raise


def prepare_gguf(gguf_path: Path, cache_root: Path, *, progress: Progress | None = None) -> Path:
    """The converted model directory ``cache_root/<stem>-<fingerprint>``, converting if missing."""
    gguf_path = Path(gguf_path)
    out_dir = Path(cache_root) / f"{gguf_path.stem}-{gguf_fingerprint(gguf_path, Path(cache_root))}"
    return convert_gguf(gguf_path, out_dir, progress=progress)
