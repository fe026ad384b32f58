"""Multi-axis rotary positions (M-RoPE: Qwen2.5-VL, Qwen3-VL) for rows of the continuous
batch, and the DeepStack features an image chunk adds after the first layers (Qwen3-VL).

An M-RoPE prompt gives each position three indices (time, height, width): a text token
has the same index on every axis, one past the largest index before it; an image's tokens
share the time index and take their row and column in the image's merged grid, offset by
where the image starts. So past its last image a prompt's positions are its token indices
plus a constant, the row's shift (0 for a text-only row), and every generated token is
text. Invariants: a forward's positions are set by the route of the step that runs it
(``prefill_route``, ``decode_route``) and read by ``MRope``, the rotary module of each
attention layer, and by ``DeepStackBlock``; without them a forward's positions are its
cache offsets (shift 0) and it adds no features; the angles are mlx-vlm's (its
frequencies, section layout and rotate-half), so they are the oracle's.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..layering import ADAPTER
from ..layering import install as install_mixin

# Qwen2.5-VL: contiguous frequency sections per axis; Qwen3-VL: the axes interleaved
STYLES = ("chunked", "interleaved")


def prompt_positions(length: int, images: Sequence) -> tuple[np.ndarray, int]:
    """([3, length] int32 positions, the shift past the prompt) for a prompt of ``length``
    tokens whose ``images`` (start, length and ``grid`` = (t, h, w) merged) are in order;
    an image of t runs (a Qwen3-VL video: a block per pair of frames, text between) is t
    images of (1, h, w), as mlx-vlm splits its grid."""
    out = np.empty((3, length), dtype=np.int64)
    cursor, next_pos = 0, 0
    for start, end, (t, h, w) in _blocks(images):
        if t * h * w != end - start:
            raise ValueError(f"an image's grid {(t, h, w)} does not fill its {end - start} positions")
        out[:, cursor:start] = next_pos + np.arange(start - cursor)
        base = next_pos + start - cursor
        tt, hh, ww = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
        out[:, start:end] = base + np.stack([tt.ravel(), hh.ravel(), ww.ravel()])
        next_pos = base + max(t, h, w)
        cursor = end
    out[:, cursor:] = next_pos + np.arange(length - cursor)
    return out.astype(np.int32), int(next_pos - cursor)


def _blocks(images: Sequence):
    """(start, end, grid) of each run of multi-axis positions."""
    for img in images:
        if img.grid is None:  # an audio file: text positions
            continue
        runs = img.feature_runs
        if len(runs) == 1:
            yield img.start + runs[0][0], img.start + runs[0][0] + runs[0][1], img.grid
            continue
        t, h, w = img.grid
        if len(runs) != t:
            raise ValueError(f"an image of {len(runs)} runs for a grid of {t} frames")
        for offset, n in runs:
            yield img.start + offset, img.start + offset + n, (1, h, w)


@dataclass(frozen=True)
class _Positions:
    """A forward's positions: ``table`` [3, >= L] from its first token (one row), or
    ``shift`` [B] added to each row's cache offset; ``deepstack`` [k, 1, L, hidden]: what
    the first k decoder blocks add to their output (an image chunk's, zero at text)."""

    table: mx.array | None = None
    shift: mx.array | None = None
    deepstack: mx.array | None = None


_current: contextvars.ContextVar[_Positions | None] = contextvars.ContextVar("mlx_grpc_mrope", default=None)


@contextmanager
def _positions(value: _Positions | None):
    token = _current.set(value)
    try:
        yield
    finally:
        _current.reset(token)


def prefill_route(route):
    """``route`` with each prefill forward's positions: an image row's table from its
    next token and its chunk's DeepStack features (an image row prefills alone); other
    rows keep their offsets."""
    @contextmanager
    def routed(seqs):
        value = None
        if len(seqs) == 1 and seqs[0].images is not None and seqs[0].images.positions is not None:
            seq = seqs[0]
            deep = seq.images.deepstack
            value = _Positions(table=mx.array(seq.images.positions[:, seq.computed:]),
                               deepstack=deep[1] if deep is not None and deep[0] == seq.computed else None)
        with route(seqs), _positions(value):
            yield
    return routed


def decode_route(route):
    """``route`` with each row's shift (all generated tokens are text)."""
    @contextmanager
    def routed(rows):
        shifts = [seq.images.shift if seq.images is not None else 0 for seq in rows]
        value = _Positions(shift=mx.array(shifts, dtype=mx.int32)) if any(shifts) else None
        with route(rows), _positions(value):
            yield
    return routed


class MRope(nn.Module):
    """The rotary module of an M-RoPE attention layer (called as ``nn.RoPE`` is)."""

    def __init__(self, dims: int, base: float, sections: Sequence[int], style: str = "chunked"):
        super().__init__()
        from mlx_vlm.models.rope_utils import compute_inv_freq, mrope_position_selector

        if style not in STYLES or sum(sections) != dims // 2:
            raise ValueError(f"M-RoPE sections {list(sections)} ({style}) do not split {dims // 2} frequencies")
        self.dims, self.style, self.sections = dims, style, tuple(sections)
        self._inv_freq = compute_inv_freq(dims, base)
        self._selector = mrope_position_selector(style, list(sections), dims // 2)
        mx.eval(self._inv_freq, self._selector)

    def __call__(self, x: mx.array, offset=0) -> mx.array:
        from mlx_vlm.models.rope_utils import compute_mrope_frequencies

        length = x.shape[-2]
        current = _current.get()
        if current is not None and current.table is not None:
            ids = current.table[:, None, :length]  # [3, 1, L]
        else:
            start = (offset if isinstance(offset, mx.array) else mx.array(offset)).reshape(-1)
            if current is not None and current.shift is not None:
                start = start + current.shift
            ids = start[:, None] + mx.arange(length)[None]  # [B, L]: every axis alike
        freqs = compute_mrope_frequencies(ids, self._inv_freq, list(self.sections), style=self.style,
                                          position_selector=self._selector)
        emb = mx.concatenate([freqs, freqs], axis=-1)
        cos, sin = mx.cos(emb).astype(x.dtype)[:, None], mx.sin(emb).astype(x.dtype)[:, None]
        rot, rest = x[..., : self.dims], x[..., self.dims:]
        half = self.dims // 2
        out = rot * cos + mx.concatenate([-rot[..., half:], rot[..., :half]], axis=-1) * sin
        return out if rest.shape[-1] == 0 else mx.concatenate([out, rest], axis=-1)


def install(model: nn.Module, sections: Sequence[int], base: float, style: str = "chunked") -> int:
    """Replaces every attention layer's ``rope`` in the mlx-lm ``model``; returns the count."""
    count = 0
    for _, module in model.named_modules():
        rope = module.get("rope") if isinstance(module, nn.Module) and "o_proj" in module else None
        if isinstance(rope, nn.RoPE):
            if rope.traditional:
                raise ValueError("M-RoPE with traditional rotation is not served")
            module.rope = MRope(rope.dims, base, sections, style)
            count += 1
    return count


class DeepStackBlock:
    """A decoder block that adds its DeepStack features (``_deepstack_index``: which) to
    its output, as mlx-vlm's qwen3_vl adds them after each of its first k layers."""

    RANK = ADAPTER

    def __call__(self, *args, **kwargs):
        out = super().__call__(*args, **kwargs)
        current = _current.get()
        if current is not None and current.deepstack is not None:
            out = out + current.deepstack[self._deepstack_index][:, : out.shape[1]]
        return out


def install_deepstack(blocks: Sequence[nn.Module]) -> None:
    for i, block in enumerate(blocks):
        block._deepstack_index = i
        install_mixin(block, DeepStackBlock)
