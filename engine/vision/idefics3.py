"""Idefics3 / SmolVLM's vision side (``Idefics3ForConditionalGeneration``, model types
"idefics3" and "smolvlm") as mlx-vlm computes it, for mlx-lm's llama.

Invariants, each what mlx-vlm's idefics3 does, so greedy output matches it: the text
model is a llama with the fields mlx-vlm's text config resolved (head_dim is hidden /
heads, no rope scaling) and its weights; an image is split by the processor into tiles
plus a global view (``rows x cols + 1`` tiles, or the global view alone), and its
placeholder becomes the processor's own text for that grid (``<fake_token_around_image>``,
``<row_r_col_c>`` or ``<global-img>``, then ``image_seq_len`` image tokens, per tile),
tokenized with the prompt; so an image is one run of ``image_seq_len`` image tokens per
tile, and its features are the SigLIP tower's last hidden state (post-layernorm) per tile,
pixel-shuffled and projected by the connector, tile after tile, written at those runs
unscaled; the prompt is attended causally, image tokens included.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import mlx.core as mx
import numpy as np

from ..errors import InvalidRequest, UnsupportedModel
from .gemma3 import untie
from .model import ProcessedImage, VisionTower, text_model, tokenizer_for

_TEXT_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "rms_norm_eps", "vocab_size",
                "num_key_value_heads", "rope_theta", "num_hidden_layers", "rope_traditional",
                "max_position_embeddings")


@dataclass
class Idefics3Tower(VisionTower):
    tile_tokens: int = 0  # image_seq_len: one tile's run
    # (rows, cols) -> the processor's text for an image of that grid (0, 0: the global view alone)
    grid_text: Callable[[int, int], str] = field(kw_only=True)

    def process(self, image) -> ProcessedImage:
        out = self.processor([[image]], return_row_col_info=True)
        pixels = np.asarray(out["pixel_values"], dtype=np.float32)  # [1, tiles, channels, height, width]
        mask = out.get("pixel_attention_mask")
        if mask is not None and not np.asarray(mask).all():  # the tower reads every patch of a tile
            raise InvalidRequest("chat.messages", "an image whose tiles are padded is not served")
        rows, cols = int(out["rows"][0][0]), int(out["cols"][0][0])
        tiles = rows * cols + 1 if rows or cols else 1
        if pixels.shape[1] != tiles:
            raise ValueError(f"the processor gave {pixels.shape[1]} tiles for a {rows} x {cols} grid")
        return ProcessedImage(pixels, self.grid_text(rows, cols), (self.tile_tokens,) * tiles)

    def tokens_for(self, pixels: np.ndarray) -> int:
        return pixels.shape[1] * self.tile_tokens

    def features(self, pixels: np.ndarray) -> mx.array:
        """[n, tiles x tile_tokens, text hidden] for ``pixels`` [n, tiles, channels, h, w]."""
        vlm = self.vlm
        n, tiles, channels, height, width = pixels.shape
        self.encoded += n
        x = mx.array(pixels.reshape(n * tiles, channels, height, width))
        patches = (height // self.patch_size, width // self.patch_size)
        mask = mx.ones((n * tiles, *patches), dtype=mx.bool_)  # what mlx-vlm derives from a full pixel mask
        hidden, *_ = vlm.vision_model(x.transpose(0, 2, 3, 1), patch_attention_mask=mask, output_hidden_states=True)
        out = vlm.connector(hidden.astype(x.dtype))
        return out.reshape(n, -1, out.shape[-1])


def text_config_of(vlm) -> dict[str, Any]:
    """mlx-lm llama's config from the text config mlx-vlm resolved."""
    resolved = vlm.config.text_config
    out = {k: getattr(resolved, k) for k in _TEXT_FIELDS}
    out.update(model_type="llama", head_dim=resolved.hidden_size // resolved.num_attention_heads,
               rope_scaling=None, tie_word_embeddings=False)
    return out


def language_weights(weights: Mapping[str, mx.array]) -> dict[str, mx.array]:
    """mlx-vlm's language-model names to mlx-lm llama's (``model.`` before all but lm_head)."""
    return {(k if k.startswith("lm_head.") else f"model.{k}"): v for k, v in weights.items()}


def _grid_text(processor) -> Callable[[int, int], str]:
    expand = sys.modules[type(processor).__module__].get_image_prompt_string
    glob = getattr(processor, "global_image_token", None) or processor.global_image_tag
    return lambda rows, cols: expand(rows, cols, processor.image_seq_len, processor.fake_image_token,
                                     processor.image_token, glob)


def load_idefics3(vlm, processor, path: Path, config: dict[str, Any]):
    """(mlx-lm llama, tokenizer, Idefics3Tower) from mlx-vlm's loaded model."""
    from ..mlx_typed import flatten

    text_config = text_config_of(vlm)
    raw = config.get("text_config") or {}
    if raw.get("head_dim") not in (None, text_config["head_dim"]):
        raise UnsupportedModel(f"{config['model_type']} with head_dim {raw['head_dim']} != hidden / heads "
                               "is not served (mlx-vlm's text model derives it)")
    weights = untie(language_weights(dict(flatten(vlm.language_model.parameters()))))
    text_config["tie_word_embeddings"] = "lm_head.weight" not in weights
    config["text_config"] = {**raw, **text_config}  # what traits read: what is served
    text = text_model(text_config, weights)
    vlm.language_model = None  # the text model holds those arrays now
    tokenizer = tokenizer_for(path, config, text_config)
    image_id = int(vlm.config.image_token_index)
    if processor.image_token_id != image_id or tokenizer.convert_tokens_to_ids(processor.image_token) != image_id:
        raise UnsupportedModel(f"the processor's image token {processor.image_token!r} is not the model's "
                               f"image token {image_id}")
    glob = getattr(processor, "global_image_token", None) or processor.global_image_tag
    markers = re.compile("|".join([re.escape(processor.fake_image_token), re.escape(glob), r"<row_\d+_col_\d+>"]))
    vision = vlm.config.vision_config
    shuffled = (vision.image_size // vision.patch_size) ** 2 // vlm.config.scale_factor ** 2
    if processor.image_seq_len != shuffled:
        raise UnsupportedModel(f"the processor's image_seq_len {processor.image_seq_len} is not the tokens the "
                               f"connector gives per tile ({shuffled})")
    return text, tokenizer, Idefics3Tower(
        vlm, processor.image_processor, image_id, int(vision.patch_size), 0,
        placeholder_text=processor.image_token, markers=markers,
        tile_tokens=int(processor.image_seq_len),
        grid_text=_grid_text(processor))
