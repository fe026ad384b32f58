"""A vision-language directory loaded as a text model plus its vision side.

The text side is mlx-lm's own model class for ``text_config`` holding the checkpoint's
language-model weights, so the scheduler, caches, kernels and adapters serve it as any
mlx-lm model; mlx-vlm supplies the vision tower, the projector and the image processor,
built from the model's own config. Invariants: ``pixels`` is plain numpy work (any
thread); ``features`` runs MLX and belongs to the engine thread and returns what is
written at the image's positions in place of the token embeddings; an image becomes
the runs of image-token positions ``process`` names (one run of ``tokens_for(pixels)``
positions, or one run per tile: idefics3), and ``features`` gives one row per position of
those runs, in order. A video (``video`` set: Qwen2.5-VL) is one run of positions over
its (time, height, width) grid, like an image of many frames; an audio file (``audio``
set: Qwen3-Omni) is one run of audio-token positions holding the audio tower's output
for its mel features, at text positions. Families: llava here,
gemma3 in ``vision/gemma3.py``, idefics3 and smolvlm in ``vision/idefics3.py``,
qwen2_5_vl, qwen3_vl and qwen3_omni_moe (multi-axis positions) in ``vision/qwen_vl.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..errors import UnsupportedModel
from .video import Sampling

# model types served with images (llava: an mlx-lm llama/qwen2 text side; idefics3/smolvlm: llama;
# qwen2_5_vl / qwen3_vl: qwen2 / qwen3 with M-RoPE; qwen3_omni_moe: its thinker, qwen3_moe with M-RoPE)
FAMILIES = ("llava", "gemma3", "idefics3", "smolvlm", "qwen2_5_vl", "qwen3_vl", "qwen3_omni_moe")


def is_vision_config(config: Mapping[str, Any]) -> bool:
    """A vision-language checkpoint this engine serves with images."""
    inner = config.get("thinker_config") if config.get("model_type") == "qwen3_omni_moe" else config
    return config.get("model_type") in FAMILIES and isinstance((inner or {}).get("vision_config"), Mapping)


@dataclass(frozen=True)
class ProcessedImage:
    """One image as its prompt holds it: the pixels the tower reads, the text its
    placeholder becomes before tokenizing (None: the placeholder token is expanded in the
    ids, llava), the lengths of its runs of image-token positions, in order, and for
    models with multi-axis positions the (time, height, width) grid its one run fills."""

    pixels: np.ndarray
    text: str | None
    runs: tuple[int, ...]
    grid: tuple[int, int, int] | None = None
    audio: bool = False  # ``pixels`` are an audio file's mel features [mel bins, frames]
    salt: bytes = b""  # joins the file's bytes in its cache key: what else decides its features


@dataclass(frozen=True)
class VideoInput:
    """How a model takes video: its video processor, the placeholder token a video's run of
    positions holds, and how frames are sampled."""

    processor: Any
    token_id: int
    sampling: Sampling
    # Qwen3-VL: the text a video's placeholder renders as ("<|vision_start|><|video_pad|>
    # <|vision_end|>"), replaced before tokenizing by one "<t.t seconds>" block per pair of
    # frames; None: the placeholder token is expanded to one run in the ids (Qwen2.5-VL)
    wrapped: str | None = None


@dataclass(frozen=True)
class AudioSupport:
    """How a model takes audio: its feature extractor (Whisper's log-mel, as the model's
    processor computes it), the audio token a file's run of positions holds, and the longest
    file the extractor reads whole (longer ones it would cut)."""

    extractor: Any
    token_id: int
    max_seconds: float


@dataclass
class VisionTower:
    """The vision tower, projector and image processor of one model."""

    vlm: nn.Module  # mlx-vlm's model, its language model dropped
    processor: Any  # the image processor (Hugging Face's, as mlx-vlm loads it)
    image_token_id: int
    patch_size: int
    extra_tokens: int  # positions the tower adds (CLS) minus those the feature strategy drops
    encoded: int = 0  # images run through the tower and projector since load
    # What the template renders an image as, where the placeholder is expanded in the text
    # before tokenizing (the processor's own expansion: gemma3, idefics3), or None where the
    # placeholder token is expanded to its run in the ids (llava).
    placeholder_text: str | None = None
    image_text: str | None = None  # the text every placeholder becomes (gemma3; idefics3: per image)

    # Texts only the placeholder's expansion writes: a rendered prompt holding one is refused.
    markers: re.Pattern[str] | None = None
    # The chat template reads every message's content as a list of parts (as Hugging Face
    # processors' templates do: llava-hf's, SmolVLM's), so text-only messages go to it as one
    # text part, never as a plain string.
    content_as_parts: bool = True
    # How the model takes images (GraphCapabilities.media.input): "embeddings" spliced into the
    # forward, or "embeddings+positions" where the image's positions are multi-axis (M-RoPE).
    media_input: str = "embeddings"
    video: VideoInput | None = None  # None: the model takes no video (GraphCapabilities.media.video)
    audio: AudioSupport | None = None  # None: the model takes no audio (GraphCapabilities.media.audio)

    def process(self, image) -> ProcessedImage:
        """``image`` (RGB PIL) as the prompt holds it (plain numpy work, any thread)."""
        pixels = self.pixels([image])
        return ProcessedImage(pixels, self.image_text, (self.tokens_for(pixels),))

    def process_video(self, frames: np.ndarray, times: np.ndarray) -> ProcessedImage:
        """``frames`` ([n, 3, height, width] uint8 RGB, at ``times`` seconds) as the prompt
        holds the video."""
        raise NotImplementedError(f"{type(self).__name__} takes no video")

    def process_audio(self, files: list[np.ndarray]) -> list[ProcessedImage]:
        """A prompt's audio ``files`` (16 kHz mono float32 samples each) as the prompt holds
        them: extracted together, as the model's processor extracts one prompt's files."""
        raise NotImplementedError(f"{type(self).__name__} takes no audio")

    def audio_features(self, mel: np.ndarray) -> mx.array:
        """[tokens, text hidden]: the audio tower's output for one file's ``mel`` (engine thread)."""
        raise NotImplementedError(f"{type(self).__name__} takes no audio")

    def pixels(self, images: list) -> np.ndarray:
        """[n, channels, height, width] float32 from RGB PIL images."""
        return np.asarray(self.processor(images=images, return_tensors="np")["pixel_values"], dtype=np.float32)

    def tokens_for(self, pixels: np.ndarray) -> int:
        """Image-token positions one image of ``pixels``' shape fills in the prompt."""
        height, width = pixels.shape[-2:]
        return (height // self.patch_size) * (width // self.patch_size) + self.extra_tokens

    def features(self, pixels: np.ndarray) -> mx.array:
        """[n, tokens, text hidden]: the projector's output for each image (engine thread)."""
        vlm = self.vlm
        self.encoded += pixels.shape[0]
        *_, hidden = vlm.vision_tower(mx.array(pixels).transpose(0, 2, 3, 1), output_hidden_states=True)
        layer = vlm.vision_feature_layer
        chosen = [hidden[i] for i in layer] if isinstance(layer, (list, tuple)) else [hidden[layer]]
        if vlm.vision_feature_select_strategy == "default":
            chosen = [h[:, 1:] for h in chosen]
        return vlm.multi_modal_projector(mx.concatenate(chosen, axis=-1))


def load_vision_model(path: Path, config: dict[str, Any]):
    """(mlx-lm text model, tokenizer, VisionTower) for the directory ``path``."""
    import mlx_vlm

    from ..mlx_typed import flatten

    mode = (config.get("quantization") or {}).get("mode", "affine")
    if "quantization_config" in config and "quantization" not in config or mode != "affine":
        raise UnsupportedModel(f"{config.get('model_type')} checkpoints quantized other than by MLX's affine "
                               "quantization are not served")
    vlm, processor = mlx_vlm.load(str(path))
    if config["model_type"] in ("qwen2_5_vl", "qwen3_vl", "qwen3_omni_moe"):
        from .qwen_vl import load_qwen_vl
        return load_qwen_vl(vlm, processor, path, config)
    if config["model_type"] in ("idefics3", "smolvlm"):
        from .idefics3 import load_idefics3
        return load_idefics3(vlm, processor, path, config)
    gemma = config["model_type"] == "gemma3"
    if gemma:
        from .gemma3 import served_text_config, text_config_of
        text_config = text_config_of(vlm)
        config["text_config"] = served_text_config(config["text_config"], text_config)  # what traits read
    else:
        text_config = dict(config["text_config"])
        text_config.setdefault("vocab_size", config.get("vocab_size"))
    weights = dict(flatten(vlm.language_model.parameters()))
    if gemma:
        from .gemma3 import untie
        weights = untie(weights)
    text = text_model(text_config, weights)
    vlm.language_model = None  # the text model holds those arrays now
    tokenizer = tokenizer_for(path, config, text_config)
    if gemma:
        from .gemma3 import gemma3_tower
        return text, tokenizer, gemma3_tower(vlm, processor, config)
    vision = config["vision_config"]
    cls = 1 if vision.get("model_type") == "clip_vision_model" else 0  # SigLIP towers have no CLS position
    dropped = 1 if config.get("vision_feature_select_strategy", "default") == "default" else 0
    tower = VisionTower(vlm, processor.image_processor, int(config["image_token_index"]),
                        int(vision["patch_size"]), cls - dropped)
    return text, tokenizer, tower


def text_model(text_config: Mapping[str, Any], weights: Mapping[str, mx.array]) -> nn.Module:
    """mlx-lm's model class for ``text_config`` holding ``weights`` (its own names); a layer
    whose weights come quantized (an mlx-vlm conversion's) is quantized as they are."""
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(dict(text_config))
    text = model_class(args_class.from_dict(dict(text_config)))
    weights = text.sanitize(dict(weights)) if hasattr(text, "sanitize") else dict(weights)
    if any(k.endswith(".scales") for k in weights):
        nn.quantize(text, class_predicate=lambda path, module: _quantized_as(path, module, weights))
    text.load_weights(list(weights.items()))
    return text


def _quantized_as(path: str, module: nn.Module, weights: Mapping[str, mx.array]) -> dict | bool:
    """The group size and bits of the layer at ``path``, read from its quantized weights'
    shapes (codes pack 32 / bits per uint32; one scale per group); False: not quantized."""
    scales = weights.get(f"{path}.scales")
    if scales is None or not hasattr(module, "to_quantized"):
        return False
    inputs = module.weight.shape[-1]
    return {"group_size": inputs // scales.shape[-1], "bits": weights[f"{path}.weight"].shape[-1] * 32 // inputs}


def tokenizer_for(path: Path, config: Mapping[str, Any], text_config: Mapping[str, Any]):
    """mlx-lm's tokenizer for the directory, ending at the model's end-of-sequence ids."""
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    eos = config.get("eos_token_id", text_config.get("eos_token_id"))
    return load_tokenizer(path, eos_token_ids=[eos] if isinstance(eos, int) else eos)
