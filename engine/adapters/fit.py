"""Whether an adapter fits its base model, and its weights per target layer.

Invariant: targets are chosen as mlx-lm's ``linear_to_lora_layers`` would, without touching
the model; tensors must be exactly ``lora_a``/``lora_b`` (DoRA: ``m``) per linear target,
else ``AdapterMismatch``. A fused layer keeps its parts' names, each on its columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from ..errors import AdapterMismatch
from ..loading.traits import decoder_blocks
from .source import AdapterSource

SHOWN = 4  # differences quoted per kind in a refusal
_CANDIDATES = (nn.Linear, nn.QuantizedLinear, nn.Embedding, nn.QuantizedEmbedding)


@dataclass(frozen=True)
class Target:
    """A layer an adapter may name: the module computing it (and its columns if fused)."""

    path: str  # the module's path in the model
    module: nn.Module
    columns: tuple[int, int] | None = None  # [start, end) of the module's outputs

    @property
    def identity(self) -> tuple[int, tuple[int, int] | None]:
        return id(self.module), self.columns


@dataclass(frozen=True)
class LayerPart:

    path: str
    module: nn.Module
    a: mx.array  # [in, rank], in the layer's dtype
    b: mx.array  # [rank, out]
    scale: float
    gain: mx.array | None  # DoRA: m / ||W + scale B^T A^T|| per output row, [out]
    targets: int = 1  # the adapter's layers this part computes (several on a fused layer)

    @property
    def nbytes(self) -> int:
        return self.a.nbytes + self.b.nbytes + (self.gain.nbytes if self.gain is not None else 0)


def fit(model: nn.Module, source: AdapterSource, model_name: str) -> list[LayerPart]:
    """The adapter's parts for ``model``; ``AdapterMismatch`` when it does not fit."""
    targets = target_layers(model, source.num_layers, source.keys)
    if not targets:
        raise AdapterMismatch(f"adapter {source.path.name!r} selects no layer of model {model_name!r} "
                              f"(keys {list(source.keys or ())})", metadata={"model": model_name})
    wrong_kind = [f"{p} ({type(t.module).__name__})" for p, t in targets.items() if not isinstance(t.module, _LINEAR)]
    if wrong_kind:
        raise AdapterMismatch(f"adapter targets layers that take no adapters here (only linear layers do): "
                              f"{_quote(wrong_kind)}", metadata={"model": model_name})
    expected = _expected_shapes(targets, source)
    problems = _differences(expected, {k: tuple(v.shape) for k, v in source.tensors.items()})
    if problems:
        raise AdapterMismatch(f"adapter {source.path.name!r} does not fit model {model_name!r}: "
                              + "; ".join(problems), metadata={"model": model_name})
    return _combined([_part(path, target, source) for path, target in targets.items()])


_LINEAR = (nn.Linear, nn.QuantizedLinear)


def target_layers(model: nn.Module, num_layers: int, keys: tuple[str, ...] | None) -> dict[str, Target]:
    """The adapter's name for each layer it applies to -> where that layer runs."""
    blocks = decoder_blocks(model)
    if keys is None:
        found: set[str] = set()
        for block in blocks:
            found.update(k for k, t in _layers(block).items()
                         if isinstance(t.module, _CANDIDATES) or hasattr(t.module, "to_lora"))
        keys = tuple(found)
    wanted = set(keys)
    chosen = {t.identity for block in blocks[-max(num_layers, 0):] for k, t in _layers(block).items() if k in wanted}
    chosen.update(t.identity for k, t in _layers(model).items() if k in wanted)
    return {name: t for name, t in _layers(model).items() if t.identity in chosen}


def _layers(root: nn.Module) -> dict[str, Target]:
    """Every module under ``root`` by path; a fused layer under the names it replaced."""
    out: dict[str, Target] = {}
    for path, module in root.named_modules():
        fused = getattr(module, "fused_from", None)
        if fused is None:
            out[path] = Target(path, module)
            continue
        parent = path.rpartition(".")[0]
        start = 0
        for name, width in fused.parts:
            out[f"{parent}.{name}" if parent else name] = Target(path, module, (start, start + width))
            start += width
    return out


def dims(module: nn.Module) -> tuple[int, int]:
    """(input, output) features of a linear layer, plain or quantized."""
    out, width = module.weight.shape
    return (width * 32 // module.bits if isinstance(module, nn.QuantizedLinear) else width), out


def _expected_shapes(targets: dict[str, Target], source: AdapterSource) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for path, target in targets.items():
        n_in, n_out = dims(target.module)
        if target.columns is not None:
            n_out = target.columns[1] - target.columns[0]
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


def _part(path: str, target: Target, source: AdapterSource) -> tuple[Target, LayerPart]:
    module = target.module
    dtype = _dtype(module)
    a, b = source.tensors[f"{path}.lora_a"], source.tensors[f"{path}.lora_b"]
    gain = None
    if source.dora:
        gain = _dora_gain(module, target.columns, a, b, source.scale, source.tensors[f"{path}.m"]).astype(dtype)
    return target, LayerPart(target.path, module, a.astype(dtype), b.astype(dtype), source.scale, gain)


def _combined(parts: list[tuple[Target, LayerPart]]) -> list[LayerPart]:
    """One part per module: a fused layer's parts joined (A side by side, B block-diagonal)."""
    by_module: dict[str, list[tuple[Target, LayerPart]]] = {}
    for target, part in parts:
        by_module.setdefault(target.path, []).append((target, part))
    out = []
    for group in by_module.values():
        if group[0][0].columns is None:
            out.append(group[0][1])
            continue
        placed: list[tuple[tuple[int, int], LayerPart]] = []
        for target, part in group:
            assert target.columns is not None  # a fused layer's parts each have their columns
            placed.append((target.columns, part))
        placed.sort(key=lambda cp: cp[0])
        first = placed[0][1]
        width = dims(first.module)[1]
        a = mx.concatenate([p.a for _, p in placed], axis=1)
        b = mx.concatenate([_spread(p.b, columns, width) for columns, p in placed], axis=0)
        gain = None
        if first.gain is not None:
            spread = []
            for columns, p in placed:
                assert p.gain is not None  # one adapter: DoRA on all its parts or none
                spread.append(_spread(p.gain[None], columns, width, fill=1.0))
            gain = mx.prod(mx.concatenate(spread), axis=0)
        out.append(LayerPart(first.path, first.module, a, b, first.scale, gain, targets=len(group)))
    return out


def _spread(values: mx.array, columns: tuple[int, int], width: int, fill: float = 0.0) -> mx.array:
    """``values`` [rows, end - start] placed on ``columns`` of a [rows, width] array."""
    rows = values.shape[0]
    start, end = columns
    pad = [mx.full((rows, n), fill, dtype=values.dtype) for n in (start, width - end)]
    return mx.concatenate([pad[0], values, pad[1]], axis=1)


def _dtype(module: nn.Module) -> mx.Dtype:
    """The dtype the layer computes in (a quantized layer's scales', unless it says otherwise)."""
    if isinstance(module, nn.QuantizedLinear):
        return getattr(module, "compute_dtype", None) or module.scales.dtype
    return module.weight.dtype


def _dora_gain(module: nn.Module, columns: tuple[int, int] | None, a: mx.array, b: mx.array, scale: float,
               m: mx.array) -> mx.array:
    """``m / ||W + scale B^T A^T||`` per output row, as mlx-lm's DoRALinear computes it."""
    weight = module.weight
    if isinstance(module, nn.QuantizedLinear):
        dtype = _dtype(module)
        assert module.biases is not None  # DoRA on a quantized layer: affine (scales and biases) only
        weight = mx.dequantize(weight, module.scales.astype(dtype), module.biases.astype(dtype),
                               group_size=module.group_size, bits=module.bits, mode=module.mode)
    if columns is not None:
        weight = weight[columns[0]:columns[1]]
    adapted = weight + (scale * b.T) @ a.T
    return m / mx.linalg.norm(adapted, axis=1)
