"""An image chat's token ids: each image's one placeholder token, as the chat template
renders it, expanded to the image's run of image-token positions.

Invariants: the placeholders in the rendered ids are exactly the request's images, in
order (a placeholder typed as text, or a template that drops one, is refused); the runs
never reach the prompt's last token, which the batch feeds as a token; each image keeps
the digest of its bytes, which keys its positions in the prefix cache.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidRequest
from ..requests import ChatPrompt
from .images import decode, image_parts
from .model import VisionTower


@dataclass(frozen=True, eq=False)
class PromptImage:
    """One image of a prompt: its run of positions and its processed pixels."""

    start: int
    length: int
    pixels: np.ndarray  # [1, channels, height, width]
    digest: bytes  # SHA-256 of the encoded image: what the prefix cache keys its positions by

    @property
    def end(self) -> int:
        return self.start + self.length


def expand_images(ids: list[int], prompt: ChatPrompt, tower: VisionTower, limits
                  ) -> tuple[list[int], tuple[PromptImage, ...]]:
    """(expanded ids, the images' runs); decodes and processes every image (blocking)."""
    parts = list(image_parts(prompt))
    marks = [i for i, t in enumerate(ids) if t == tower.image_token_id]
    if len(marks) != len(parts):
        raise InvalidRequest("chat.messages", f"the rendered prompt holds {len(marks)} image placeholders for "
                                              f"{len(parts)} images (is the image token typed as text?)")
    out: list[int] = []
    images: list[PromptImage] = []
    last = 0
    for mark, (field, part) in zip(marks, parts):
        pixels = tower.pixels([decode(f"{field}.data", part, limits)])
        n = tower.tokens_for(pixels)
        out += ids[last:mark]
        images.append(PromptImage(len(out), n, pixels, hashlib.sha256(part.data).digest()))
        out += [tower.image_token_id] * n
        last = mark + 1
    out += ids[last:]
    if images and images[-1].end >= len(out):
        raise InvalidRequest("chat.messages", "the prompt must not end with an image")
    return out, tuple(images)
