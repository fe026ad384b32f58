"""GGML block-quantized tensors as MLX affine-quantized weights (``w = scale * u + bias``, groups of 32).

Invariant: types with one scale and offset per 32 values map exactly (same codes, held
in as many bits as the file's: Q4_0/Q4_1/Q4_K in 4, Q5_0/Q5_1/Q5_K in 5, Q8_0 in 8);
every other type ``gguf`` can dequantize (Q6_K, Q2_K, Q3_K: scales over 16 values; the
IQ codebooks; TQ ternaries; MXFP4/NVFP4 floats) is re-quantized to 8-bit min-max groups
from those values (not exact: each value within 1/510 of its group's range); types
``gguf`` cannot read are refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Affine", "UnsupportedTensorType", "to_affine", "supported_types"]

GROUP = 32


@dataclass(frozen=True)
class Affine:
    weight: np.ndarray  # uint32 [rows, cols * bits // 32]
    scales: np.ndarray  # float32 [rows, cols // 32]
    biases: np.ndarray  # float32 [rows, cols // 32]
    bits: int  # 4, 5 or 8
    exact: bool  # dequantizes to the values the file's blocks hold
    group_size: int = GROUP


class UnsupportedTensorType(ValueError):
    pass


def _f16(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view(np.float16).astype(np.float32)


def _nibbles_32(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes -> [n, 32] codes: low nibbles first, then high nibbles."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _high_bits_32(qh: np.ndarray) -> np.ndarray:
    """[n, 4] bytes (a little-endian uint32) -> [n, 32] bits, bit i for element i."""
    return np.unpackbits(np.ascontiguousarray(qh), axis=-1, bitorder="little")


def _q4_0(b):
    d = _f16(b[:, 0:2])
    return _nibbles_32(b[:, 2:18]), d, -8.0 * d


def _q4_1(b):
    return _nibbles_32(b[:, 4:20]), _f16(b[:, 0:2]), _f16(b[:, 2:4])


def _q5_0(b):
    d = _f16(b[:, 0:2])
    return _nibbles_32(b[:, 6:22]) | (_high_bits_32(b[:, 2:6]) << 4), d, -16.0 * d


def _q5_1(b):
    return _nibbles_32(b[:, 8:24]) | (_high_bits_32(b[:, 4:8]) << 4), _f16(b[:, 0:2]), _f16(b[:, 2:4])


def _q8_0(b):
    d = _f16(b[:, 0:2])
    return (b[:, 2:34].view(np.int8).astype(np.int16) + 128).astype(np.uint8), d, -128.0 * d


def _k_scales(b):
    """Q4_K/Q5_K super-block scales and mins: per 32-group scale d*sc and bias -dmin*m."""
    n = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    s = b[:, 4:16].reshape(n, 3, 4)
    lo, hi, mix = s[:, 0], s[:, 1], s[:, 2]
    sc = np.concatenate([lo & 0x3F, (mix & 0x0F) | ((lo >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([hi & 0x3F, (mix >> 4) | ((hi >> 2) & 0x30)], axis=-1)
    return d * sc.astype(np.float32), -(dmin * mn.astype(np.float32))


def _q4_k_codes(qs: np.ndarray) -> np.ndarray:
    """[n, 128] bytes -> [n, 256] codes (per 64-value chunk: low nibbles, then high)."""
    n = qs.shape[0]
    chunks = qs.reshape(n, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (chunks & 0x0F).reshape(n, 256)


def _q4_k(b):
    scale, bias = _k_scales(b)
    return _q4_k_codes(b[:, 16:144]), scale, bias


def _q5_k(b):
    n = b.shape[0]
    scale, bias = _k_scales(b)
    qh = b[:, 16:48].reshape(n, 1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1, 1)
    high = (qh & 1).reshape(n, 256)  # bit j of byte i is element 32 * j + i
    return _q4_k_codes(b[:, 48:176]) | (high << 4), scale, bias


_EXACT = {"Q4_0": (_q4_0, 4), "Q4_1": (_q4_1, 4), "Q8_0": (_q8_0, 8), "Q5_0": (_q5_0, 5),
          "Q5_1": (_q5_1, 5), "Q4_K": (_q4_k, 4), "Q5_K": (_q5_k, 5)}
_REQUANTIZED = ("Q6_K", "Q2_K", "Q3_K", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
                "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4")


def supported_types() -> dict[str, str]:
    out = {name: f"exact, {bits}-bit groups of 32" for name, (_, bits) in _EXACT.items()}
    out.update({name: "re-quantized to 8-bit groups of 32 (not exact)" for name in _REQUANTIZED})
    return out


def to_affine(data: np.ndarray, qtype: int, rows: int, cols: int, name: str = "") -> Affine:
    """The raw blocks of a [rows, cols] tensor of GGML type ``qtype`` as MLX affine groups."""
    import gguf

    kind = gguf.GGMLQuantizationType(qtype).name
    where = f" (tensor {name!r})" if name else ""
    if kind in ("F32", "F16", "BF16"):
        raise ValueError(f"{kind}{where} is a float type: use its values as they are")
    if kind not in _EXACT and kind not in _REQUANTIZED:
        raise UnsupportedTensorType(f"GGML tensor type {kind}{where} is not served; served: "
                                    f"{', '.join(supported_types())}, F32, F16, BF16")
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
    if cols % block:
        raise UnsupportedTensorType(f"{kind}{where}: rows of {cols} values are not whole {block}-value blocks")
    blocks = np.ascontiguousarray(data, dtype=np.uint8).reshape(rows * cols // block, size)
    if kind in _EXACT:
        fn, bits = _EXACT[kind]
        codes, scale, bias = fn(blocks)
        return _pack(codes.reshape(rows, cols), scale.reshape(rows, -1), bias.reshape(rows, -1), bits, True)
    with np.errstate(invalid="ignore", over="ignore"):  # a damaged block is refused just below
        values = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(qtype)).reshape(rows, cols)
    if not np.isfinite(values).all():
        raise UnsupportedTensorType(f"{kind}{where}: its blocks hold non-finite values (a damaged file?)")
    return requantize_8bit(values.astype(np.float32))


def requantize_8bit(values: np.ndarray) -> Affine:
    """Min-max 8-bit groups of 32 (constant groups exactly)."""
    rows, cols = values.shape
    g = values.reshape(rows, cols // GROUP, GROUP)
    lo, hi = g.min(axis=-1), g.max(axis=-1)
    scale = ((hi - lo) / 255.0).astype(np.float32)
    safe = np.where(scale == 0, 1.0, scale)
    codes = np.clip(np.rint((g - lo[..., None]) / safe[..., None]), 0, 255).astype(np.uint8)
    return _pack(codes.reshape(rows, cols), scale, lo.astype(np.float32), 8, False)


def _pack(codes: np.ndarray, scale: np.ndarray, bias: np.ndarray, bits: int, exact: bool) -> Affine:
    """MLX packing: element k of a row at bit k * bits of its little-endian words."""
    rows, cols = codes.shape
    if bits == 4:
        packed = (codes[:, 0::2] & 0x0F) | (codes[:, 1::2] << 4)
    elif bits in (5, 6):
        packed = _bit_stream(codes, bits)
    else:
        packed = codes
    weight = np.ascontiguousarray(packed.astype(np.uint8)).view(np.uint32).reshape(rows, cols * bits // 32)
    return Affine(weight, scale.astype(np.float32), bias.astype(np.float32), bits, exact)


def _bit_stream(codes: np.ndarray, bits: int) -> np.ndarray:
    """[rows, cols] codes -> [rows, cols * bits // 8] bytes: 8 codes at a time as one
    little-endian integer of ``bits`` bytes (code i at bit i * bits)."""
    rows, cols = codes.shape
    word = np.zeros((rows, cols // 8), dtype="<u8")
    for i in range(8):
        word |= codes[:, i::8].astype("<u8") << np.uint64(i * bits)
    return word.view(np.uint8).reshape(rows, cols // 8, 8)[:, :, :bits].reshape(rows, cols * bits // 8)
