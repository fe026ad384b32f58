"""GGML blocks for test files: ``gguf.quants.quantize`` where gguf can, and simple
min-max quantizers for Q4_K, Q5_K and Q6_K (which gguf only reads). They need only
make valid blocks with non-trivial sub-block scales and mins, not llama.cpp's
best ones; ``gguf.quants.dequantize`` reads them back."""

from __future__ import annotations

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType


def quantize(values: np.ndarray, qtype: Q) -> np.ndarray:
    """A [rows, cols] float array as uint8 blocks [rows, bytes per row]."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    rows, cols = values.shape
    if qtype in _K:
        blocks = _K[qtype](values.reshape(-1, 256))
        return blocks.reshape(rows, -1)
    return gguf.quants.quantize(values, qtype)


def _f16_bytes(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).reshape(-1, 1).view(np.uint8)


def _six_bit(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per super-block a float16 step and 6-bit multiples of it for [n, 8] values >= 0."""
    top = values.max(axis=-1, keepdims=True)
    step = (top / 63).astype(np.float16).astype(np.float32)
    safe = np.where(step == 0, 1, step)
    return step[:, 0], np.clip(np.rint(values / safe), 0, 63).astype(np.uint8)


def _pack_k_scales(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    lo = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    hi = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    mix = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    return np.concatenate([lo, hi, mix], axis=-1).astype(np.uint8)


def _k_codes(blocks: np.ndarray, levels: int):
    """Q4_K/Q5_K: (d, dmin, packed scales, codes [n, 256]) for levels 15 or 31."""
    n = blocks.shape[0]
    sub = blocks.reshape(n, 8, 32)
    lo = np.minimum(sub.min(axis=-1), 0)
    hi = sub.max(axis=-1)
    d, sc = _six_bit((hi - lo) / levels)
    dmin, mn = _six_bit(-lo)
    scale = d[:, None] * sc
    bias = dmin[:, None] * mn
    safe = np.where(scale == 0, 1, scale)
    codes = np.clip(np.rint((sub + bias[..., None]) / safe[..., None]), 0, levels).astype(np.uint8)
    return d, dmin, _pack_k_scales(sc, mn), codes.reshape(n, 256)


def _k_nibbles(codes: np.ndarray) -> np.ndarray:
    c = codes.reshape(-1, 4, 2, 32) & 0x0F
    return (c[:, :, 0] | (c[:, :, 1] << 4)).reshape(-1, 128)


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    d, dmin, scales, codes = _k_codes(blocks, 15)
    return np.concatenate([_f16_bytes(d), _f16_bytes(dmin), scales, _k_nibbles(codes)], axis=-1)


def _q5_k(blocks: np.ndarray) -> np.ndarray:
    d, dmin, scales, codes = _k_codes(blocks, 31)
    high = (codes >> 4).reshape(-1, 8, 32)  # bit j of byte i: element 32 * j + i
    qh = np.zeros((codes.shape[0], 32), dtype=np.uint8)
    for j in range(8):
        qh |= high[:, j] << j
    return np.concatenate([_f16_bytes(d), _f16_bytes(dmin), scales, qh, _k_nibbles(codes)], axis=-1)


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    sub = blocks.reshape(n, 16, 16)
    step = np.abs(sub).max(axis=-1) / 31
    d = (step.max(axis=-1) / 127).astype(np.float16).astype(np.float32)
    sc = np.clip(np.rint(step / np.where(d == 0, 1, d)[:, None]), -128, 127).astype(np.int8)
    scale = d[:, None] * sc.astype(np.float32)
    q = np.clip(np.rint(sub / np.where(scale == 0, 1, scale)[..., None]) + 32, 0, 63).astype(np.uint8)
    q = q.reshape(n, 2, 128)  # element a * 128 + r
    ql = np.zeros((n, 2, 64), dtype=np.uint8)
    qh = np.zeros((n, 2, 32), dtype=np.uint8)
    for h in range(2):
        ql |= (q[:, :, h * 64:(h + 1) * 64] & 0x0F) << (4 * h)
    for s in range(4):
        qh |= (q[:, :, s * 32:(s + 1) * 32] >> 4) << (2 * s)
    return np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc.view(np.uint8), _f16_bytes(d)], axis=-1)


_K = {Q.Q4_K: _q4_k, Q.Q5_K: _q5_k, Q.Q6_K: _q6_k}


def random_blocks(qtype: Q, rows: int = 24, cols: int = 256) -> np.ndarray:
    """Well-formed blocks of ``qtype`` for a [rows, cols] tensor: random bytes, keeping the
    rows whose values ``gguf`` reads as finite and moderate (random half-precision scales
    can be infinite)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    per_row = cols // block * size
    rng = np.random.default_rng(int(qtype))
    found = []
    while len(found) < rows:
        row = rng.integers(0, 256, per_row, dtype=np.uint8)
        with np.errstate(invalid="ignore", over="ignore"):
            values = gguf.quants.dequantize(row.reshape(-1, size), qtype)
        if np.isfinite(values).all() and np.abs(values).max() < 1e4:
            found.append(row)
    return np.stack(found)
