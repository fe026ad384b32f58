"""A prompt chunk's input embeddings with its images' features at their positions.

Invariants (engine thread only): an image's features are computed once, when the first
chunk that covers any of its positions is fed, and kept until the sequence leaves
prefill; a chunk boundary may fall anywhere inside an image's run.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from .model import VisionTower
from .prompt import PromptImage


def token_embedding(model: nn.Module) -> nn.Module:
    """The text model's input embedding (mlx-lm's ``model.embed_tokens``)."""
    inner = getattr(model, "model", None) or getattr(model, "language_model", None)
    return inner.embed_tokens


class ImageRows:
    """A sequence's images and, once computed, their features."""

    def __init__(self, images: tuple[PromptImage, ...]):
        self.images = images
        self._features: dict[int, mx.array] = {}

    def covers(self, start: int, end: int) -> bool:
        return any(img.start < end and start < img.end for img in self.images)

    def embeddings(self, model: nn.Module, tower: VisionTower, tokens: mx.array, start: int) -> mx.array:
        """[1, L, hidden] for ``tokens`` ([1, L], the prompt from ``start``)."""
        end = start + tokens.shape[1]
        h = token_embedding(model)(tokens)
        for i, img in enumerate(self.images):
            a, b = max(start, img.start), min(end, img.end)
            if a >= b:
                continue
            if i not in self._features:
                self._features[i] = tower.features(img.pixels)[0]
            h[:, a - start : b - start, :] = self._features[i][a - img.start : b - img.start].astype(h.dtype)
        return h

    def release(self) -> None:
        self._features.clear()
