"""Gemma 3's vision side (``Gemma3ForConditionalGeneration``) as mlx-vlm computes it, for
mlx-lm's gemma3_text model.

Invariants, each what mlx-vlm's gemma3 does, so greedy output matches it: the text
config is the one mlx-vlm resolved (its defaults fill what the checkpoint leaves out;
its global rope base is mlx-lm's ``rope_theta``); the tied embedding stays tied; an
image is the processor's text run (two newlines, ``<start_of_image>``, the soft tokens,
``<end_of_image>``, two newlines) tokenized with the prompt; its features are the
SigLIP tower's last hidden state, average-pooled to ``mm_tokens_per_image`` tokens,
RMS-normalised and projected, then divided by the square root of the model config's
``hidden_size`` (mlx-vlm's divisor, 2048 where the config has none), because the text
model multiplies every input embedding by sqrt(hidden) and the features are written
before that; the prompt is attended causally, image tokens included (mlx-vlm's prefill
passes no mask, so its language model builds the causal and sliding-window masks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import mlx.core as mx
import numpy as np

from ..errors import UnsupportedModel
from .model import VisionTower

_TEXT_FIELDS = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "head_dim",
                "rms_norm_eps", "vocab_size", "num_key_value_heads", "rope_local_base_freq",
                "query_pre_attn_scalar", "sliding_window", "sliding_window_pattern", "max_position_embeddings",
                "rope_scaling")


@dataclass
class Gemma3Tower(VisionTower):
    tokens: int = 0  # mm_tokens_per_image: every image's run
    divisor: float = 1.0  # sqrt of mlx-vlm's config.hidden_size

    def tokens_for(self, pixels: np.ndarray) -> int:
        return self.tokens

    def features(self, pixels: np.ndarray) -> mx.array:
        vlm = self.vlm
        self.encoded += pixels.shape[0]
        dtype = vlm.multi_modal_projector.mm_input_projection_weight.dtype
        hidden, _, _ = vlm.vision_tower(mx.array(pixels).transpose(0, 2, 3, 1).astype(dtype),
                                        output_hidden_states=True)
        return vlm.multi_modal_projector(hidden) / self.divisor


def text_config_of(vlm) -> dict[str, Any]:
    """mlx-lm gemma3_text's config from the text config mlx-vlm resolved."""
    resolved = vlm.config.text_config
    if getattr(resolved, "rope_traditional", False):
        raise UnsupportedModel("gemma3 with traditional rope is not served")
    out = {k: getattr(resolved, k) for k in _TEXT_FIELDS}
    out.update(model_type="gemma3_text", rope_theta=resolved.rope_global_base_freq)
    return out


CONTEXT = 131_072  # Hugging Face's Gemma3TextConfig default, which released checkpoints leave out


def served_text_config(raw: Mapping[str, Any], resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's text config with what it leaves out filled in as served: the
    resolved values, and Gemma 3's own context length (mlx-vlm's default is no context
    fact: it only parameterises rope scalings that gemma3 does not use)."""
    return {**resolved, "max_position_embeddings": CONTEXT, **raw}


def untie(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """Drops the output projection mlx-vlm copied from the embedding (its scales and biases
    too where quantized), so mlx-lm ties them."""
    def same(name: str) -> bool:
        head, embed = weights.get(f"lm_head.{name}"), weights.get(f"model.embed_tokens.{name}")
        return head is None and embed is None or (head is not None and embed is not None and (
            head is embed or bool(mx.array_equal(head, embed).item())))

    if "lm_head.weight" in weights and all(same(n) for n in ("weight", "scales", "biases")):
        weights = {k: v for k, v in weights.items() if not k.startswith("lm_head.")}
    return weights


def gemma3_tower(vlm, processor, config: Mapping[str, Any]) -> Gemma3Tower:
    tokens = int(vlm.config.text_config.mm_tokens_per_image)
    image_id = int(config.get("image_token_index", vlm.config.image_token_index))
    if getattr(processor, "image_seq_length", tokens) != tokens or processor.image_token_id != image_id:
        raise UnsupportedModel(f"the processor's image run ({processor.image_seq_length} x token "
                               f"{processor.image_token_id}) does not match the model's ({tokens} x {image_id})")
    if getattr(processor.image_processor, "do_pan_and_scan", False):
        raise UnsupportedModel("gemma3 pan-and-scan crops are not served; turn do_pan_and_scan off")
    vision = vlm.config.vision_config
    return Gemma3Tower(vlm, processor.image_processor, image_id, int(vision.patch_size), 0,
                       image_text=processor.full_image_sequence, placeholder_text=processor.boi_token,
                       tokens=tokens, divisor=vlm.config.hidden_size ** 0.5)
