"""A GGUF file's tensor names, mapped onto the parameters of mlx-lm's model for it.

Invariants: the map is derived, never listed: mlx-lm's model is built from the config (lazily,
nothing computed), each parameter name goes through gguf-py's per-architecture tables
(``TensorNameMap``'s candidates, ``MODEL_TENSORS``, ``TENSOR_NAMES``) as llama.cpp's converter
sends each Hugging Face name, and the result is inverted. A file tensor with no place in the model,
a parameter the file lacks, two parameters on one tensor or a shape that differs raises
``UnsupportedModel`` naming it, before any weight is converted.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

from ..errors import UnsupportedModel

__all__ = ["converter_names", "model_parameters", "tensor_names"]

# mlx-lm parameter names that differ from the Hugging Face names llama.cpp's converter maps:
# experts stacked [n_expert, ...] (``switch_mlp``), which the converter names ``experts``.
_MLX_TO_HF = ((".switch_mlp.", ".experts."),)
_SUFFIXES = (".weight", ".bias")


def _model(config: Mapping[str, Any]):
    from mlx_lm.utils import _get_classes

    try:
        model_class, args_class = _get_classes(dict(config))
        return model_class(args_class.from_dict(dict(config)))
    except Exception as exc:  # an mlx-lm module that cannot take this config
        raise UnsupportedModel(f"mlx-lm's {config.get('model_type')!r} model cannot be built from this GGUF "
                               f"file's config: {type(exc).__name__}: {exc}") from exc


def _shapes(model) -> dict[str, tuple[int, ...]]:
    from ..mlx_typed import flatten

    return {name: tuple(value.shape) for name, value in flatten(model.parameters())}


def model_parameters(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter of mlx-lm's model for ``config`` (unquantized)."""
    return _shapes(_model(config))


@functools.lru_cache(maxsize=16)
def converter_names(arch_name: str, n_blocks: int) -> dict[str, str]:
    """Hugging Face name (no suffix) -> GGUF name, as llama.cpp's converter maps ``arch_name``
    (``gguf.TensorNameMap``, built here without touching its shared class tables)."""
    import gguf
    from gguf.tensor_mapping import TensorNameMap

    arch = {name: key for key, name in gguf.MODEL_ARCH_NAMES.items()}[arch_name]
    known = set(gguf.MODEL_TENSORS[arch])
    out: dict[str, str] = {}
    for tensor, keys in TensorNameMap.mappings_cfg.items():
        if tensor in known:
            for key in (gguf.TENSOR_NAMES[tensor], *keys):
                out[key] = gguf.TENSOR_NAMES[tensor]
    blocks = {**TensorNameMap.block_mappings_cfg, **TensorNameMap.arch_block_mappings_cfg.get(arch, {})}
    for bid in range(n_blocks):
        for tensor, keys in blocks.items():
            if tensor in known:
                name = gguf.TENSOR_NAMES[tensor].format(bid=bid)
                for key in (name, *keys):
                    out[key.format(bid=bid)] = name
    return out


def _converter_name(names: Mapping[str, str], param: str) -> str | None:
    hf = param
    for mlx, converter in _MLX_TO_HF:
        hf = hf.replace(mlx, converter)
    for suffix in _SUFFIXES:
        if hf.endswith(suffix) and (base := names.get(hf[: -len(suffix)])) is not None:
            return base + suffix
    return None


def tensor_names(arch_name: str, config: Mapping[str, Any],
                 shapes: Mapping[str, tuple[int, ...]]) -> dict[str, str]:
    """GGUF tensor name -> mlx-lm parameter name for every tensor in ``shapes`` (name -> row-major
    shape), checked as ``mlx_lm.load`` will load them: names, shapes, then the model's own
    ``sanitize`` (which may drop a tied output, say) and every parameter it then needs."""
    import mlx.core as mx

    model = _model(config)
    params = _shapes(model)
    names = converter_names(arch_name, int(config["num_hidden_layers"]))
    model_type = config.get("model_type")
    inverse: dict[str, str] = {}
    for param in params:
        gguf_name = _converter_name(names, param)
        if gguf_name is None:
            continue  # reported below as missing, if the model still needs it
        if gguf_name in inverse:
            raise UnsupportedModel(f"GGUF tensor {gguf_name!r} would be both {inverse[gguf_name]!r} and {param!r} "
                                   f"of mlx-lm's {model_type!r} model")
        inverse[gguf_name] = param
    for name in sorted(shapes):
        if name not in inverse:
            raise UnsupportedModel(f"GGUF tensor {name!r} has no place in mlx-lm's {model_type!r} model "
                                   f"(a {arch_name} file this server cannot serve)")
        want = params[inverse[name]]
        if tuple(shapes[name]) != want:
            raise UnsupportedModel(f"GGUF tensor {name!r} has shape {tuple(shapes[name])}; mlx-lm's {model_type!r} "
                                   f"model holds {inverse[name]!r} as {want} with this file's config")
    weights = {inverse[name]: mx.zeros(shape) for name, shape in shapes.items()}  # lazy: nothing allocated
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)
    needed = _shapes(model)
    if missing := sorted(set(needed) - set(weights)):
        gguf_name = _converter_name(names, missing[0])
        raise UnsupportedModel(f"mlx-lm's {model_type!r} model needs {missing[0]!r}"
                               + (f" (GGUF {gguf_name!r})" if gguf_name else "")
                               + f", which this {arch_name} file lacks ({len(missing)} missing in all)")
    if changed := sorted(k for k in needed if tuple(weights[k].shape) != needed[k]):
        raise UnsupportedModel(f"mlx-lm's {model_type!r} model reshapes {changed[0]!r} on loading; "
                               f"the {arch_name} file's layout is not the one it expects")
    return {name: inverse[name] for name in shapes}
