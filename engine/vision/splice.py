"""A prompt chunk's input embeddings with its images' features at their positions, and
the prompt's key in the prefix cache.

Invariants (engine thread only): an image's features are fetched once per sequence, when
the first chunk that covers any of its positions is fed (from the model's encoded-image
cache, or the tower on a miss: ``EncodedImages``), and kept until the sequence leaves
prefill; its rows go to its runs' positions in order (markers between an image's runs
keep their token embeddings); a chunk boundary may fall anywhere inside an image's span. In the prefix cache's
key an image's positions hold ids derived from the digest of its bytes and the position
in its run, all at or above 2**31 (beyond any vocabulary, within 32 bits), so a prefix
matches only where the same images sit at the same places. A prompt whose images have
multi-axis grids (M-RoPE) keeps its positions and its shift (``mrope.prompt_positions``;
an audio file's positions are text positions).
Features wider than the text model (DeepStack: the tower's k more layers' features after
its output, each as wide) give their chunk's ``deepstack`` [k, 1, L, hidden], zero at
positions that are not the image's.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn

from .encoded import EncodedImages
from .mrope import prompt_positions
from .prompt import PromptImage


def token_embedding(model: nn.Module) -> nn.Module:
    """The text model's input embedding (mlx-lm's ``model.embed_tokens``)."""
    inner: Any = getattr(model, "model", None) or getattr(model, "language_model", None)
    return inner.embed_tokens


class ImageRows:
    """A sequence's images and, once computed, their features."""

    def __init__(self, images: tuple[PromptImage, ...], prompt_len: int):
        self.images = images
        self._features: dict[int, mx.array] = {}
        self._keys = [_key_ids(img.digest, img.length) for img in images]
        self.positions, self.shift = None, 0  # [3, prompt_len] int32 and the shift past it (M-RoPE)
        self.deepstack: tuple[int, mx.array] | None = None  # (chunk start, [k, 1, L, hidden]) of the last chunk
        if any(img.grid is not None for img in images):  # audio files keep text positions
            self.positions, self.shift = prompt_positions(prompt_len, images)

    def key(self, tokens: Sequence[int]) -> list[int]:
        """``tokens`` (the sequence's, from position 0) as the prefix cache keys them."""
        out = list(tokens)
        for img, ids in zip(self.images, self._keys):
            if img.start >= len(out):
                break
            span = min(img.end, len(out)) - img.start
            out[img.start : img.start + span] = ids[:span]
        return out

    def covers(self, start: int, end: int) -> bool:
        return any(img.start < end and start < img.end for img in self.images)

    def embeddings(self, model: nn.Module, encoder: EncodedImages, tokens: mx.array, start: int) -> mx.array:
        """[1, L, hidden] for ``tokens`` ([1, L], the prompt from ``start``)."""
        end = start + tokens.shape[1]
        h = token_embedding(model)(tokens)
        width, deep = h.shape[-1], None
        for i, img in enumerate(self.images):
            if max(start, img.start) >= min(end, img.end):
                continue
            if i not in self._features:
                self._features[i] = encoder.features(img)
            row = 0  # the first feature row of the run
            for offset, n in img.feature_runs:
                a, b = max(start, img.start + offset), min(end, img.start + offset + n)
                if a < b:
                    first = row + a - img.start - offset
                    rows = self._features[i][first : first + b - a].astype(h.dtype)
                    h[:, a - start : b - start, :] = rows[:, :width]
                    if rows.shape[-1] > width:
                        if deep is None:
                            deep = mx.zeros((rows.shape[-1] // width - 1, 1, end - start, width), h.dtype)
                        deep[:, 0, a - start : b - start, :] = rows[:, width:].reshape(b - a, -1, width
                                                                                       ).transpose(1, 0, 2)
                row += n
        self.deepstack = (start, deep) if deep is not None else None
        return h

    def release(self) -> None:
        self._features.clear()
        self.deepstack = None


KEY_BASE = 1 << 31


def _key_ids(digest: bytes, length: int) -> list[int]:
    return [KEY_BASE + (int.from_bytes(hashlib.blake2b(digest + k.to_bytes(4, "little"), digest_size=4).digest(),
                                       "little") >> 1) for k in range(length)]
