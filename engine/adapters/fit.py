"""Whether an adapter fits its base model, and its weights per target layer.

The target layers are chosen as ``mlx_lm.tuner.utils.linear_to_lora_layers`` chooses
them (the ``keys`` modules, or every linear layer, of the last ``num_layers`` blocks;
a key naming a top-level module counts too), but without touching the model. The
adapter fits when its tensors are exactly ``<target>.lora_a`` [in, rank] and
``<target>.lora_b`` [rank, out] (DoRA: and ``<target>.m`` [out]) for every target,
and every target is a linear layer (plain or quantized). Anything else is refused
with ``AdapterMismatch`` saying what differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from ..errors import AdapterMismatch
from .source import AdapterSource

SHOWN = 4  # differences quoted per kind in a refusal
_CANDIDATES = (nn.Linear, nn.QuantizedLinear, nn.Embedding, nn.QuantizedEmbedding)


@dataclass(frozen=True)
class LayerPart:
    """One adapter's weights for one linear layer of the base, ready to run."""

    path: str
    module: nn.Module
    a: mx.array  # [in, rank], in the layer's dtype
    b: mx.array  # [rank, out]
    scale: float
    gain: mx.array | None  # DoRA: m / ||W + scale B^T A^T|| per output row, [out]

    @property
    def nbytes(self) -> int:
        return self.a.nbytes + self.b.nbytes + (self.gain.nbytes if self.gain is not None else 0)


def fit(model: nn.Module, source: AdapterSource, model_name: str) -> list[LayerPart]:
    """The adapter's parts for ``model``; ``AdapterMismatch`` when it does not fit."""
    targets = target_layers(model, source.num_layers, source.keys)
    if not targets:
        raise AdapterMismatch(f"adapter {source.path.name!r} selects no layer of model {model_name!r} "
                              f"(keys {list(source.keys or ())})", metadata={"model": model_name})
    wrong_kind = [f"{p} ({type(m).__name__})" for p, m in targets.items() if not isinstance(m, _LINEAR)]
    if wrong_kind:
        raise AdapterMismatch(f"adapter targets layers that take no adapters here (only linear layers do): "
                              f"{_quote(wrong_kind)}", metadata={"model": model_name})
    expected = _expected_shapes(targets, source)
    problems = _differences(expected, {k: tuple(v.shape) for k, v in source.tensors.items()})
    if problems:
        raise AdapterMismatch(f"adapter {source.path.name!r} does not fit model {model_name!r}: "
                              + "; ".join(problems), metadata={"model": model_name})
    return [_part(path, module, source) for path, module in targets.items()]


_LINEAR = (nn.Linear, nn.QuantizedLinear)


def target_layers(model: nn.Module, num_layers: int, keys: tuple[str, ...] | None) -> dict[str, nn.Module]:
    """Module path -> module of every layer the adapter applies to."""
    blocks = list(getattr(model, "layers", ()))
    if keys is None:
        found: set[str] = set()
        for block in blocks:
            found.update(k for k, m in block.named_modules() if isinstance(m, _CANDIDATES) or hasattr(m, "to_lora"))
        keys = tuple(found)
    wanted = set(keys)
    chosen = {id(m): m for block in blocks[-max(num_layers, 0):] for k, m in block.named_modules() if k in wanted}
    chosen.update({id(m): m for k, m in model.named_modules() if k in wanted})
    return {path: m for path, m in model.named_modules() if id(m) in chosen}


def dims(module: nn.Module) -> tuple[int, int]:
    """(input, output) features of a linear layer, plain or quantized."""
    out, width = module.weight.shape
    return (width * 32 // module.bits if isinstance(module, nn.QuantizedLinear) else width), out


def _expected_shapes(targets: dict[str, nn.Module], source: AdapterSource) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for path, module in targets.items():
        n_in, n_out = dims(module)
        shapes[f"{path}.lora_a"] = (n_in, source.rank)
        shapes[f"{path}.lora_b"] = (source.rank, n_out)
        if source.dora:
            shapes[f"{path}.m"] = (n_out,)
    return shapes


def _differences(expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]]) -> list[str]:
    extra = sorted(set(found) - set(expected))
    missing = sorted(set(expected) - set(found))
    shapes = [f"{k}: adapter {found[k]}, model expects {expected[k]}"
              for k in sorted(set(found) & set(expected)) if found[k] != expected[k]]
    out = []
    if extra:
        out.append(f"{len(extra)} tensors name no target layer of the model ({_quote(extra)})")
    if missing:
        out.append(f"{len(missing)} tensors the model's layers need are missing ({_quote(missing)})")
    if shapes:
        out.append(f"{len(shapes)} tensors differ in shape ({_quote(shapes)})")
    return out


def _quote(items: list[str]) -> str:
    more = len(items) - SHOWN
    return ", ".join(items[:SHOWN]) + (f", and {more} more" if more > 0 else "")


def _part(path: str, module: nn.Module, source: AdapterSource) -> LayerPart:
    dtype = _dtype(module)
    a, b = source.tensors[f"{path}.lora_a"], source.tensors[f"{path}.lora_b"]
    gain = _dora_gain(module, a, b, source.scale, source.tensors[f"{path}.m"]) if source.dora else None
    return LayerPart(path, module, a.astype(dtype), b.astype(dtype), source.scale,
                     gain.astype(dtype) if gain is not None else None)


def _dtype(module: nn.Module) -> mx.Dtype:
    return module.scales.dtype if isinstance(module, nn.QuantizedLinear) else module.weight.dtype


def _dora_gain(module: nn.Module, a: mx.array, b: mx.array, scale: float, m: mx.array) -> mx.array:
    """``m / ||W + scale B^T A^T||`` per output row, as mlx-lm's DoRALinear computes it."""
    weight = module.weight
    if isinstance(module, nn.QuantizedLinear):
        weight = mx.dequantize(weight, module.scales, module.biases, group_size=module.group_size,
                               bits=module.bits, mode=module.mode)
    adapted = weight + (scale * b.T) @ a.T
    return m / mx.linalg.norm(adapted, axis=1)
