"""An image chat's token ids: each image's placeholder, as the chat template renders it,
expanded to the image's run of image-token positions (llava: the placeholder token in
the ids; gemma3: the placeholder in the text, replaced by the processor's own run text
before tokenizing, as its processor does).

Invariants: the placeholders in the rendered prompt are exactly the request's images, in
order, and every image-token id of the result lies in one image's run (a placeholder or
image token typed as text, or a template that drops one, is refused); the runs
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


def expand_images(text: str, tokenizer, prompt: ChatPrompt, tower: VisionTower, limits
                  ) -> tuple[list[int], tuple[PromptImage, ...]]:
    """(token ids of the rendered ``text`` with its images' runs, the runs); decodes and
    processes every image (blocking)."""
    if tower.image_text is not None:
        return _expand_text(text, tokenizer, prompt, tower, limits)
    ids = tokenizer.encode(text, add_special_tokens=False)
    parts = list(image_parts(prompt))
    marks = [i for i, t in enumerate(ids) if t == tower.image_token_id]
    _check_count(len(marks), len(parts))
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


def _check_count(found: int, images: int) -> None:
    if found != images:
        raise InvalidRequest("chat.messages", f"the rendered prompt holds {found} image placeholders for "
                                              f"{images} images (is an image token typed as text?)")


def _expand_text(text: str, tokenizer, prompt: ChatPrompt, tower: VisionTower, limits
                 ) -> tuple[list[int], tuple[PromptImage, ...]]:
    parts = list(image_parts(prompt))
    _check_count(text.count(tower.placeholder_text), len(parts))
    ids = tokenizer.encode(text.replace(tower.placeholder_text, tower.image_text), add_special_tokens=False)
    runs = _runs(ids, tower.image_token_id)
    images: list[PromptImage] = []
    for (start, length), (field, part) in zip(runs, parts) if len(runs) == len(parts) else ():
        pixels = tower.pixels([decode(f"{field}.data", part, limits)])
        if length != tower.tokens_for(pixels):
            break
        images.append(PromptImage(start, length, pixels, hashlib.sha256(part.data).digest()))
    if len(images) != len(parts):
        raise InvalidRequest("chat.messages", "the prompt's image tokens do not form one run per image "
                                              "(is an image token typed as text?)")
    if images and images[-1].end >= len(ids):
        raise InvalidRequest("chat.messages", "the prompt must not end with an image")
    return ids, tuple(images)


def _runs(ids: list[int], token: int) -> list[tuple[int, int]]:
    """(start, length) of each maximal run of ``token`` in ``ids``."""
    runs: list[tuple[int, int]] = []
    for i, t in enumerate(ids):
        if t != token:
            continue
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs
