"""Encoded images kept for reuse: the projector's output per image, keyed by the digest of
the image's bytes, in an ``ObjectCache`` bounded by bytes.

Invariants: one ``EncodedImages`` belongs to one model's scheduler, so features never
cross models; an entry is put only after its features were evaluated and matched the
image's runs, so a failing tower or a mis-sized image leaves nothing behind; the
entries are immutable arrays, so a reader keeps its reference after its lease ends. The
tower runs on the engine thread only.
"""

from __future__ import annotations

import sys

import mlx.core as mx

from ..caches.objects import ObjectCache
from .model import VisionTower
from .prompt import PromptImage

MAX_ENTRIES = 4096


class EncodedImages:
    """A model's vision tower behind its cache of encoded images (``max_bytes`` 0: no cache)."""

    def __init__(self, tower: VisionTower, max_bytes: int):
        self.tower = tower
        self._cache: ObjectCache[mx.array] | None = (
            ObjectCache(MAX_ENTRIES, max_bytes, size_of=lambda a: a.nbytes, key_size=sys.getsizeof)
            if max_bytes > 0 else None)

    def features(self, image: PromptImage) -> mx.array:
        """[tokens, text hidden]: ``image``'s features, from the cache or the tower."""
        key = image.digest.hex()
        if self._cache is not None and (lease := self._cache.take(key)) is not None:
            with lease as features:
                return features
        features = self.tower.audio_features(image.pixels) if image.audio else self.tower.features(image.pixels)[0]
        if features.shape[0] != image.features:  # the runs were sized from the processed image
            raise ValueError(f"an image gave {features.shape[0]} features for {image.features} positions")
        mx.eval(features)
        if self._cache is not None:
            self._cache.put(key, features)
        return features

    @property
    def entries(self) -> int:
        return len(self._cache) if self._cache is not None else 0

    @property
    def bytes(self) -> int:
        return self._cache.size if self._cache is not None else 0

    @property
    def hits(self) -> int:
        return self._cache.hits if self._cache is not None else 0
