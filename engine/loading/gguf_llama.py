"""llama.cpp's numerics for a GGUF model (``numerics="llama"``): its quantized linear layers
hold the file's own blocks and compute through ggml's CPU backend (``kernels.ggml``).

Invariant: every 2-D quantized tensor of the file that the model holds as a QuantizedLinear
becomes a ``GgmlLinear`` of the same blocks (rows in the model's order); a tied output layer
(a QuantizedEmbedding's ``as_linear``) multiplies by the blocks while lookups stay exact.
Float tensors and stacked experts keep the exact path.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_unflatten

from ..kernels import ggml
from ..layering import KERNEL, install
from .gguf import served_tensor_names
from .gguf_arch import architecture, unpermute_qk
from .gguf_file import read_gguf

if TYPE_CHECKING:  # the class GgmlHead is installed on, as the checker sees its ``self``
    _HeadHost = nn.QuantizedEmbedding
else:  # at run time a plain mixin
    _HeadHost = object

__all__ = ["NUMERICS", "GgmlLinear", "apply_llama_numerics", "ggml_types"]

NUMERICS = ("exact", "llama")
_FLOAT = {"F32", "F16", "BF16"}


class GgmlLinear(nn.Module):
    """x @ W.T (+ bias) with W a GGUF tensor of ggml type ``ggml_type``: ggml's numerics.
    Its blocks are a parameter (``blocks``) unless ggml holds them repacked
    (``outside_bytes``: memory facts count them)."""

    def __init__(self, blocks: mx.array, ggml_type: int, bias: mx.array | None = None):
        super().__init__()
        self._weights = ggml.GgmlWeights(blocks, ggml_type)
        if self._weights.blocks is not None:
            self.blocks = self._weights.blocks
        if bias is not None:
            self.bias = bias
        self.ggml_type = ggml_type
        self.outside_bytes = self._weights.outside_bytes
        self.freeze()

    def __call__(self, x: mx.array) -> mx.array:
        y = self._weights(x)
        return y + self["bias"] if "bias" in self else y


class GgmlHead(_HeadHost):
    """A tied output layer: ``as_linear`` by the file's blocks (held by ggml, counted in
    ``outside_bytes``), lookups as before."""

    RANK = KERNEL
    _ggml_weights: ggml.GgmlWeights  # set before it is installed

    def as_linear(self, x: mx.array) -> mx.array:
        return self._ggml_weights(x)


def apply_llama_numerics(model: nn.Module, gguf_path: Path, config: Mapping[str, Any]) -> dict[str, int]:
    """Puts the file's blocks into ``model``'s quantized layers; counts by kind."""
    ggml.open_backend()
    file = read_gguf(gguf_path)
    names = served_tensor_names(file, config)
    arch = architecture(file.metadata)
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    modules = dict(model.named_modules())
    replaced: list[tuple[str, nn.Module]] = []
    counts = {"ggml_linear": 0, "ggml_head": 0}
    for tensor in file.tensors:
        if tensor.type_name in _FLOAT or len(tensor.shape) != 2 or tensor.name not in names:
            continue
        path = names[tensor.name].removesuffix(".weight")
        module = modules.get(path)
        if not isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            continue
        blocks = np.asarray(tensor.data, dtype=np.uint8).reshape(tensor.shape[0], -1)
        kind = tensor.base.rsplit(".", 1)[-1]
        if arch.permuted_qk and kind in heads:
            blocks = unpermute_qk(blocks, heads[kind])
        if blocks.shape[1] != ggml.row_bytes(tensor.qtype, tensor.shape[1]):
            continue  # not a layout ggml multiplies (cannot happen for a file ggml wrote)
        held = mx.array(np.ascontiguousarray(blocks))
        if isinstance(module, nn.QuantizedEmbedding):
            weights = ggml.GgmlWeights(held, int(tensor.qtype))
            module._ggml_weights = weights
            module.outside_bytes = weights.outside_bytes + (weights.blocks.nbytes if weights.blocks is not None else 0)
            install(module, GgmlHead)
            counts["ggml_head"] += 1
        else:
            replaced.append((path, GgmlLinear(held, int(tensor.qtype), module.get("bias"))))
            counts["ggml_linear"] += 1
    if replaced:
        model.update_modules(tree_unflatten(replaced))
    mx.eval(model.parameters())
    return {k: v for k, v in counts.items() if v}


def ggml_types(model: nn.Module) -> str:
    """The ggml types the model's GgmlLinear layers hold, e.g. "Q4_K/Q6_K"."""
    import gguf  # names only

    kinds = {m.ggml_type for _, m in model.named_modules() if isinstance(m, GgmlLinear)}
    return "/".join(sorted(gguf.GGMLQuantizationType(k).name for k in kinds))
