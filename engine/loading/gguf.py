"""Convert a llama-architecture GGUF file into a local Hugging Face-layout model directory.

The result (``config.json``, ``model.safetensors``, ``tokenizer.json`` and friends)
loads with ``mlx_lm.load()`` without any network access.

Tensors and metadata are read with ``mx.load(path, return_metadata=True)``; it
returns Q4_0/Q4_1/Q8_0 tensors as MLX affine-quantized triplets (``name.weight``
packed uint32, ``name.scales``, ``name.biases``, 32-element groups), the same
values exactly (``w = scale * q + bias``). They are kept as they are: the
directory holds the file's own bits, and its config's ``quantization`` entry
makes mlx-lm build quantized layers (bits per layer inferred from the shapes).
Float tensors keep their dtype (float16 stays float16, float32 stays float32).
llama.cpp stores the rows of the q/k projections permuted for its interleaved
rope; they (and their scales and biases) are un-permuted back to the Hugging Face
order.

Use :func:`prepare_gguf` to convert once into a cache directory.
"""

from __future__ import annotations

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

from engine.loading.gguf_tokenizer import GGUFVocab, build_tokenizer, special_tokens_map, tokenizer_config

__all__ = ["convert_gguf", "prepare_gguf", "gguf_fingerprint", "hf_name", "permute_qk", "unpermute_qk"]

logger = logging.getLogger("engine.loading.gguf")

Progress = Callable[[str, float], None]

MANIFEST_NAME = "gguf_source.json"
# Bump when the output layout changes so that cached conversions are redone.
CONVERTER_VERSION = 2
SUPPORTED_ARCHITECTURES = ("llama",)
_GGUF_GROUP_SIZE = 32  # block size of Q4_0, Q4_1 and Q8_0
_FINGERPRINT_CHUNK = 1 << 20

# GGUF tensor name (inside "blk.N.") -> Hugging Face name (inside "model.layers.N.").
_LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}


def permute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's ``permute`` (convert_hf_to_gguf.py): HF rope order -> GGUF order.

    ``n_head`` is the number of heads of this projection (KV heads for k_proj).
    """
    rows = weight.shape[0]
    halves = weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:])
    return halves.swapaxes(1, 2).reshape(weight.shape)


def unpermute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of :func:`permute_qk`: GGUF q/k projection rows -> Hugging Face order."""
    rows = weight.shape[0]
    pairs = weight.reshape(n_head, rows // n_head // 2, 2, *weight.shape[1:])
    return pairs.swapaxes(1, 2).reshape(weight.shape)


def gguf_fingerprint(gguf_path: Path) -> str:
    """A short content fingerprint: size, first and last MiB of the file, converter version."""
    digest = hashlib.sha256(f"v{CONVERTER_VERSION}".encode())
    size = gguf_path.stat().st_size
    digest.update(size.to_bytes(8, "little"))
    with gguf_path.open("rb") as f:
        digest.update(f.read(_FINGERPRINT_CHUNK))
        f.seek(max(0, size - _FINGERPRINT_CHUNK))
        digest.update(f.read(_FINGERPRINT_CHUNK))
    return digest.hexdigest()[:12]


def _scalar(meta: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """A metadata value as a Python scalar (``mx.load`` returns numbers as 0-d arrays)."""
    value = meta.get(key, default)
    if isinstance(value, mx.array):
        value = value.item()
        if isinstance(value, float):  # float32 in the file: use its shortest repr (1e-05)
            value = float(str(np.float32(value)))
    return value


def build_config(meta: Mapping[str, Any], tensors: Mapping[str, mx.array]) -> dict[str, Any]:
    """The ``config.json`` of a llama GGUF file, from its metadata."""
    arch = _scalar(meta, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"unsupported GGUF architecture {arch!r}; supported: {SUPPORTED_ARCHITECTURES}")

    def get(key: str, default: Any = None) -> Any:
        return _scalar(meta, f"{arch}.{key}", default)

    hidden, heads = get("embedding_length"), get("attention.head_count")
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": get("feed_forward_length"),
        "num_hidden_layers": get("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": get("attention.head_count_kv", heads),
        "head_dim": get("attention.key_length", hidden // heads),
        "vocab_size": get("vocab_size", len(meta["tokenizer.ggml.tokens"])),
        "max_position_embeddings": get("context_length"),
        "rms_norm_eps": get("attention.layer_norm_rms_epsilon"),
        "rope_theta": get("rope.freq_base", 10000.0),
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in tensors,
        "bos_token_id": _scalar(meta, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _scalar(meta, "tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float16",
    }
    if any(name.endswith(".scales") for name in tensors):  # the real bits per layer come from the shapes
        config["quantization"] = {"group_size": _GGUF_GROUP_SIZE, "bits": 4}
    scaling = get("rope.scaling.type", "none")
    if scaling == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": get("rope.scaling.factor")}
    elif scaling not in ("none", None):
        raise ValueError(f"unsupported rope scaling {scaling!r} in GGUF file")
    return config


def _parts(tensors: Mapping[str, mx.array], base: str) -> dict[str, mx.array]:
    """Tensor ``base``'s arrays by suffix: ``weight`` alone, or the quantized
    ``weight``/``scales``/``biases`` triplet, exactly as the file holds them."""
    return {suffix: tensors[f"{base}.{suffix}"] for suffix in ("weight", "scales", "biases")
            if f"{base}.{suffix}" in tensors}


def hf_name(base: str) -> str:
    """Hugging Face tensor name (without ``.weight``) for a GGUF tensor base name."""
    if base in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[base]
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_TENSORS:
        return f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}"
    raise ValueError(f"unsupported GGUF tensor {base!r} for the llama architecture")


def convert_weights(
    tensors: Mapping[str, mx.array], config: Mapping[str, Any], progress: Progress
) -> dict[str, mx.array]:
    """GGUF tensors -> Hugging Face named tensors (quantized ones as their triplets),
    q/k rows un-permuted."""
    bases = sorted({name.rsplit(".", 1)[0] for name in tensors}, key=_layer_then_name)
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    n_layers = config["num_hidden_layers"]
    out: dict[str, mx.array] = {}
    for base in bases:
        kind = base.rsplit(".", 1)[-1]
        for suffix, array in _parts(tensors, base).items():
            if kind in heads:  # a row permutation: the same for packed weights, scales and biases
                array = mx.array(unpermute_qk(np.array(array), heads[kind]))
            out[f"{hf_name(base)}.{suffix}"] = array
            mx.eval(array)
        if kind == "ffn_up" or base == "token_embd":
            layer = int(base.split(".")[1]) + 1 if base.startswith("blk.") else 0
            progress("weights", layer / n_layers)
    return out


def _layer_then_name(base: str) -> tuple[int, str]:
    """Sort key: global tensors first, then layer by layer."""
    parts = base.split(".")
    return (int(parts[1]) if parts[0] == "blk" else -1, base)


def _read_gguf(gguf_path: Path) -> tuple[dict[str, mx.array], dict[str, Any]]:
    """Tensors and metadata of a GGUF file (MLX reads F32/F16/Q4_0/Q4_1/Q8_0 tensors)."""
    try:
        return mx.load(str(gguf_path), return_metadata=True)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"cannot read GGUF file {gguf_path}: {exc}") from exc


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_model_dir(gguf_path: Path, target: Path, progress: Progress) -> None:
    """Write every output file of the conversion into the (empty) directory ``target``."""
    progress("reading", 0.0)
    tensors, meta = _read_gguf(gguf_path)
    config = build_config(meta, tensors)
    vocab = GGUFVocab.from_metadata(meta)
    progress("tokenizer", 0.0)
    build_tokenizer(vocab).save(str(target / "tokenizer.json"))
    _write_json(target / "tokenizer_config.json", tokenizer_config(vocab, config["max_position_embeddings"]))
    _write_json(target / "special_tokens_map.json", special_tokens_map(vocab))
    _write_json(target / "config.json", config)
    _write_json(target / "generation_config.json", {
        "bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
    })
    weights = convert_weights(tensors, config, progress)
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
    """Default progress callback: stage boundaries at INFO, the steps between at DEBUG."""
    level = logging.INFO if fraction in (0.0, 1.0) else logging.DEBUG
    logger.log(level, "GGUF conversion: %s %3.0f%%", stage, 100 * fraction)


def convert_gguf(gguf_path: Path, out_dir: Path, *, progress: Progress | None = None) -> Path:
    """Convert ``gguf_path`` into the Hugging Face model directory ``out_dir``; return it.

    Returns at once when ``out_dir`` already holds a conversion of the same file.
    The files are written into a temporary directory next to ``out_dir`` which is
    then renamed, so ``out_dir`` is never seen half-written. ``progress(stage,
    fraction)`` is called as the conversion advances (default: log lines).
    """
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    fingerprint = gguf_fingerprint(gguf_path)
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
    """Move ``new`` to ``out_dir``, replacing a stale ``out_dir``.

    If another process finished the same conversion first, its result is kept.
    """
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
    out_dir = Path(cache_root) / f"{gguf_path.stem}-{gguf_fingerprint(gguf_path)}"
    return convert_gguf(gguf_path, out_dir, progress=progress)
