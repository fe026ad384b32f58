"""Loading generation models (Hugging Face directories, GGUF files, hub ids) through
``mlx_lm.load``; vision-language directories through ``engine.vision.model`` (an mlx-lm
text model plus the vision side)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper

from .. import kernels
from ..errors import UnsupportedModel
from ..hardware.device import runtime_dtype
from ..mlx_typed import load_lm
from ..vision.model import VisionTower, is_vision_config, load_vision_model
from .compat import apply_batch_fixes
from .gguf import prepare_gguf
from .gguf_llama import NUMERICS, apply_llama_numerics, ggml_types
from .traits import ModelTraits, traits_of
from .windows import apply_windows

log = logging.getLogger("engine.loading.model")


def cache_root() -> Path:
    """Where converted models are kept: $MLX_GRPC_CACHE or ~/.cache/mlx-grpc."""
    root = os.environ.get("MLX_GRPC_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "mlx-grpc"


@dataclass
class LoadedModel:
    name: str
    model: nn.Module
    tokenizer: TokenizerWrapper
    config: dict[str, Any]
    source: str
    artifact: Path
    dtype: str
    kernels: dict[str, int]  # CPU kernels put into the model, by kind
    numerics: str  # "exact" or "llama" (engine.loading.gguf_llama)

    traits: ModelTraits  # what differs per architecture, read here and nowhere else
    vision: VisionTower | None = None  # a vision-language model's image side

    @property
    def model_type(self) -> str:
        return self.traits.model_type

    @property
    def vocab_size(self) -> int:
        return self.traits.vocab_size

    @property
    def context_length(self) -> int:
        return self.traits.context_length

    @property
    def eos_ids(self) -> frozenset[int]:
        return frozenset(int(i) for i in self.tokenizer.eos_token_ids or ())

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))


def resolve_artifact(source: str | Path) -> Path:
    """A loadable directory or hub id for ``source`` (a GGUF file is converted once)."""
    path = Path(source).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return prepare_gguf(path, cache_root())
    return path


def load_generation_model(source: str | Path, *, name: str = "", dtype: str = "auto",
                          use_kernels: bool = True, dequantize: bool = False, numerics: str = "exact") -> LoadedModel:
    """Quantized weights stay quantized unless ``dequantize``; floating weights are cast
    to the runtime dtype; CPU kernels go in unless ``use_kernels`` is False; ``numerics``
    "llama" computes a GGUF file's quantized products as llama.cpp does."""
    gguf_file = _llama_numerics_source(source, numerics, dequantize, use_kernels)
    artifact = resolve_artifact(source)
    local = artifact / "config.json"
    config = json.loads(local.read_text()) if local.is_file() else None
    vision = None
    if config is not None and is_vision_config(config):
        model, tokenizer, vision = load_vision_model(artifact, config)
    else:
        model, tokenizer = load_lm(str(artifact))
        config = config if config is not None else _read_config(artifact)
    target = runtime_dtype(dtype)
    if target is not None:
        model.set_dtype(target)
        if vision is not None:  # the tower too: half precision is scalar on the CPU backend
            vision.vlm.set_dtype(target)
    if dequantize:  # after the cast: the floats come from scales in the target dtype
        from mlx_lm.utils import dequantize_model

        model = dequantize_model(model)
    mx.eval(model.parameters())
    name = name or default_name(source)
    apply_windows(model, config)  # before traits: they read the caches it makes
    traits = traits_of(model, tokenizer, config)  # before the kernels change the module tree
    if vision is not None:
        traits = replace(traits, media=("image",))
    apply_batch_fixes(model)
    llama = apply_llama_numerics(model, gguf_file, config) if gguf_file is not None else {}
    if llama:
        log.info("llama numerics in %s (ggml's products): %s", name, ", ".join(f"{k} x{v}" for k, v in llama.items()))
    applied = {**llama, **(kernels.apply_to_decoder(model, name) if use_kernels else {})}
    if use_kernels and vision is not None:
        applied = {**applied, **{f"tower {k}": v for k, v in kernels.apply_to_tower(vision.vlm, name).items()}}
    weight_dtype = _weight_dtype(model)  # after the kernels: they may hold scales in float16
    if llama:
        weight_dtype = f"{ggml_types(model)} blocks by ggml (llama numerics); {weight_dtype}"
    log.info("loaded %s from %s (%s, %s)", name, source, config.get("model_type"), weight_dtype)
    return LoadedModel(name, model, tokenizer, config, str(source), artifact, weight_dtype, applied, numerics,
                       traits, vision)


def _llama_numerics_source(source: str | Path, numerics: str, dequantize: bool, use_kernels: bool) -> Path | None:
    """The GGUF file whose blocks llama numerics compute with; None for exact numerics."""
    if numerics not in NUMERICS:
        raise UnsupportedModel(f"numerics {numerics!r}: one of {', '.join(NUMERICS)}")
    if numerics == "exact":
        return None
    path = Path(source).expanduser()
    if not (path.is_file() and path.suffix == ".gguf"):
        raise UnsupportedModel("llama numerics compute with a GGUF file's own blocks: the model must be a .gguf file")
    if dequantize or not use_kernels or not kernels.enabled():
        raise UnsupportedModel("llama numerics run on the CPU kernels with the weights quantized "
                               "(not with --dequantize or the kernels off)")
    return path


def default_name(source: str | Path) -> str:
    """The file stem or directory name, lower-cased."""
    path = Path(str(source).rstrip("/"))
    return (path.stem if path.suffix == ".gguf" else path.name).lower()


def _read_config(artifact: Path) -> dict[str, Any]:
    path = artifact / "config.json"
    if path.is_file():
        return json.loads(path.read_text())
    from mlx_lm.utils import hf_repo_to_path  # hub ids: the downloaded snapshot

    return json.loads((hf_repo_to_path(str(artifact)) / "config.json").read_text())


def _weight_dtype(model: nn.Module) -> str:
    """E.g. "float32", or "q4/q8 affine (5.63 bits per weight), float32"."""
    from ..mlx_typed import flatten

    dtypes = {str(v.dtype).split(".")[-1] for _, v in flatten(model.parameters())}
    floating = "/".join(sorted(d for d in dtypes if "float" in d)) or "unknown"
    quantized = [m for _, m in model.named_modules() if "scales" in m and hasattr(m, "bits")]
    if not quantized:
        return floating
    kinds = "/".join(f"q{b}" for b in sorted({m.bits for m in quantized}))
    modes = "/".join(sorted({getattr(m, "mode", "affine") for m in quantized}))
    nbytes = sum(m[k].nbytes for m in quantized for k in ("weight", "scales", "biases") if k in m)
    count = sum(m["weight"].size * 32 // m.bits for m in quantized)
    return f"{kinds} {modes} ({8 * nbytes / count:.2f} bits per weight), {floating}"
