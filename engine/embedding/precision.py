"""An embedding encoder's matmul precision (``--embed-precision f32|bf16|int8``).

Invariants: bf16 and int8 change only the BERT layers' four products, on the weights converted
once, by the kernels' own products where the build has the instructions, else ggml's CPU
backend: bf16, bfloat16 values with each input row rounded the same way (nearest even); int8,
the kernels' 8-bit codes (a scale per weight column, per input row and block of 128 values)
or ggml's Q8_0 (blocks of 32 values with a half-precision scale, weights and rows alike); embeddings,
norms, attention, pooling and heads stay float32. A precision runs only where the CPU has the
instructions that make it faster than float32 (bf16: AVX-512 BF16; int8: AVX-512 VNNI or
AVX-VNNI), the kernels and ggml are available and the model is a BERT encoder; anywhere else
the model runs float32 and ``Precision.reason`` says why, unless ``force`` asks for the
products regardless (slower, for checking accuracy on any CPU).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

__all__ = ["F32", "PRECISIONS", "Precision", "choose", "cpu_flags"]

log = logging.getLogger("engine.embedding")

PRECISIONS = ("f32", "bf16", "int8")
_DTYPE = {"f32": "float32", "bf16": "bfloat16", "int8": "int8"}
_GGML_TYPE = {"bf16": 30, "int8": 8}  # GGML_TYPE_BF16, GGML_TYPE_Q8_0
_BLOCK = {"bf16": 1, "int8": 32}  # an input width must be a multiple of the type's block
# Any one of these CPU flags (as /proc/cpuinfo spells them) makes the precision pay.
_FAST_ON = {"bf16": ("avx512_bf16", "amx_bf16"), "int8": ("avx512_vnni", "avx_vnni", "amx_int8")}


@dataclass(frozen=True)
class Precision:
    requested: str  # f32, bf16 or int8
    running: str  # what the products run in
    reason: str = ""  # why running differs from requested ("" when it does not)

    @property
    def dtype(self) -> str:
        """ModelInfo.dtype: float32, bfloat16 or int8."""
        return _DTYPE[self.running]

    @property
    def ggml_type(self) -> int | None:
        return _GGML_TYPE.get(self.running)


F32 = Precision("f32", "f32")


@functools.lru_cache(maxsize=1)
def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (empty where the system does not list them)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def choose(requested: str, *, encoder_widths: tuple[int, ...] | None, kernels: str | None,
           force: bool = False, flags: frozenset[str] | None = None) -> Precision:
    """What a model runs in. ``encoder_widths``: its products' input widths (None: not a BERT
    encoder); ``kernels``: why the CPU kernels or ggml cannot run (None: they can)."""
    if requested not in PRECISIONS:
        raise ValueError(f"embedding precision {requested!r}: expected one of {', '.join(PRECISIONS)}")
    if requested == "f32":
        return F32
    if encoder_widths is None:
        return _fallback(requested, "only BERT encoders take bf16 or int8 products")
    if kernels is not None:
        return _fallback(requested, kernels)
    if odd := [k for k in encoder_widths if k % _BLOCK[requested]]:
        return _fallback(requested, f"an input width of {odd[0]} is not a multiple of {_BLOCK[requested]}")
    have = cpu_flags() if flags is None else flags
    if not force and not any(f in have for f in _FAST_ON[requested]):
        return _fallback(requested, f"this CPU has none of {', '.join(f.upper() for f in _FAST_ON[requested])}, "
                                    f"without which {requested} products are slower than float32")
    return Precision(requested, requested)


def _fallback(requested: str, why: str) -> Precision:
    return Precision(requested, "f32", f"--embed-precision {requested} runs float32: {why}")
