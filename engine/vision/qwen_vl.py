"""The vision side of Qwen2.5-VL (``Qwen2_5_VLForConditionalGeneration``, model type
"qwen2_5_vl"), Qwen3-VL (``Qwen3VLForConditionalGeneration``, "qwen3_vl") and Qwen3-Omni's
thinker (``Qwen3OmniMoeForConditionalGeneration``, "qwen3_omni_moe": images and audio) as
mlx-vlm computes it, for mlx-lm's qwen2 / qwen3 / qwen3_moe with multi-axis positions.

Invariants, each what mlx-vlm's qwen2_5_vl / qwen3_vl does, so greedy output matches it:
the text model is a qwen2 (head_dim hidden / heads) or qwen3 with the fields mlx-vlm's
text config resolved and its weights, every attention layer's rotary module an ``MRope``
with the config's ``mrope_section`` (sections in turn: qwen2_5_vl; interleaved:
qwen3_vl); an image is the processor's patches of its resized pixels
on a (1, h, w) grid of patches, and its placeholder ``<|image_pad|>`` (between
``<|vision_start|>`` and ``<|vision_end|>``) is expanded in the ids to one run of
h * w / merge^2 image tokens; its features are the tower's merged patches (window
attention in Qwen2.5-VL's, the patch merger), written at the run unscaled, and in
Qwen3-VL the DeepStack mergers' outputs after them (added after the first k decoder
blocks: ``mrope.DeepStackBlock``); its positions are the merged grid's
(``mrope.prompt_positions``); the prompt is attended causally. A video (Qwen2.5-VL) is the video processor's patches of
its sampled frames on a (t, h, w) grid (t: frame pairs), expanded from ``<|video_pad|>``
to one run of t * h * w / merge^2 tokens, its time index the frame pair's (mlx-vlm's
``get_rope_index``: no seconds scaling); the tower encodes it a pair of frames at a time
(its attention never crosses frames, so the features are the whole video's). An audio
file (Qwen3-Omni) is the feature extractor's log-mel frames of the whole file, its ``<|audio_pad|>`` expanded to the
audio tower's output length (13 tokens per 100 frames), written at the run unscaled, at
text positions (mlx-vlm's ``get_rope_index`` gives audio no grid).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from ..errors import UnsupportedModel
from ..liveness import still_working
from ..speech.audio import SAMPLE_RATE
from . import mrope
from .gemma3 import untie
from .model import AudioSupport, ProcessedImage, VideoInput, VisionTower, text_model, tokenizer_for
from .video import Sampling

_TEXT_FIELDS = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "rms_norm_eps",
                "vocab_size", "num_key_value_heads", "max_position_embeddings", "rope_theta", "tie_word_embeddings")
# model type -> (mlx-lm model type of its text side, M-RoPE style, text fields besides _TEXT_FIELDS)
FAMILIES = {"qwen2_5_vl": ("qwen2", "chunked", ()), "qwen3_vl": ("qwen3", "interleaved", ("head_dim",)),
            "qwen3_omni_moe": ("qwen3_moe", "interleaved", ("head_dim", "num_experts", "num_experts_per_tok",
                                                            "decoder_sparse_step", "mlp_only_layers",
                                                            "moe_intermediate_size", "norm_topk_prob"))}
# families served with video; Qwen3-VL's videos carry a "<t.t seconds>" marker per pair of frames
VIDEO = ("qwen2_5_vl", "qwen3_vl")
TIMESTAMPED = ("qwen3_vl",)
VISION_START, VISION_END = "<|vision_start|>", "<|vision_end|>"


@dataclass
class QwenVLTower(VisionTower):
    merge: int = 2  # spatial_merge_size: patches per merged token along each side

    def process(self, image) -> ProcessedImage:
        out = self.processor(images=[image])
        patches = np.asarray(out["pixel_values"], dtype=np.float32)
        t, h, w = (int(v) for v in np.asarray(out["image_grid_thw"])[0])
        if t != 1 or h % self.merge or w % self.merge:
            raise ValueError(f"the processor gave a {t} x {h} x {w} grid for one image")
        pixels = patches.reshape(1, h, w, patches.shape[-1])  # the processor's patch order; the shape holds the grid
        grid = (1, h // self.merge, w // self.merge)
        return ProcessedImage(pixels, None, (grid[1] * grid[2],), grid)

    def process_video(self, frames: np.ndarray, times: np.ndarray) -> ProcessedImage:
        video = self.video
        assert video is not None
        out = video.processor(videos=[frames])
        patches = np.asarray(out["pixel_values_videos"], dtype=np.float32)
        t, h, w = (int(v) for v in np.asarray(out["video_grid_thw"])[0])
        if h % self.merge or w % self.merge or t * h * w != patches.shape[0]:
            raise ValueError(f"the processor gave a {t} x {h} x {w} grid for {patches.shape[0]} patches")
        grid = (t, h // self.merge, w // self.merge)
        pixels = patches.reshape(t, h, w, patches.shape[-1])
        per_frame = grid[1] * grid[2]
        if video.wrapped is None:
            return ProcessedImage(pixels, None, (t * per_frame,), grid)
        text = timestamped(video.wrapped, times, video.processor.temporal_patch_size, t, per_frame)
        return ProcessedImage(pixels, text, (per_frame,) * t, grid)

    def process_audio(self, files: list[np.ndarray]) -> list[ProcessedImage]:
        audio = self.audio
        assert audio is not None
        out = audio.extractor(files, padding=True, sampling_rate=SAMPLE_RATE)  # as mlx-vlm's processor calls it
        mel = np.asarray(out["input_features"], dtype=np.float32)
        mask = out.get("attention_mask")
        frames = np.full(len(files), mel.shape[-1]) if mask is None else np.asarray(mask).sum(-1)
        if mask is not None and np.asarray(mask).shape[-1] > mel.shape[-1]:  # a mask over samples, not frames
            frames //= np.asarray(mask).shape[-1] // mel.shape[-1]
        padded = mel.shape[-1].to_bytes(4, "little")  # a file's frames depend on the longest one's length too
        return [ProcessedImage(mel[k, :, :n], None, (audio_tokens(int(n)),), audio=True, salt=padded)
                for k, n in enumerate(frames)]

    def audio_features(self, mel: np.ndarray) -> mx.array:
        self.encoded += 1
        tower = self.vlm.audio_tower
        x = mx.array(mel).astype(tower.conv2d1.weight.dtype)
        out = tower(x, feature_lens=mx.array([mel.shape[-1]], dtype=mx.int32))
        mx.eval(out)
        still_working()  # a long file is many steps' work: the watchdog sees it move
        return out

    def tokens_for(self, pixels: np.ndarray) -> int:
        return pixels.shape[0] * pixels.shape[1] * pixels.shape[2] // self.merge ** 2

    def features(self, pixels: np.ndarray) -> mx.array:
        """[1, tokens, text hidden] for one image's ``pixels`` [1, h, w, patch values], or one
        video's [t, h, w, patch values] (t: its frames over the temporal patch)."""
        tower = self.vlm.vision_tower
        t, h, w, values = pixels.shape
        self.encoded += 1
        groups = []
        for frame in range(t):  # each pair of frames on its own: the towers attend within a frame only
            x = mx.array(pixels[frame].reshape(h * w, values)).astype(tower.patch_embed.proj.weight.dtype)
            out = tower(x, mx.array([[1, h, w]]), output_hidden_states=False)
            if isinstance(out, tuple):  # qwen3_vl: (features, DeepStack features), each [tokens, text hidden]
                features, deepstack = out
                out = mx.concatenate([features, *deepstack], axis=-1)
            if t > 1:
                mx.eval(out)
                still_working()  # a long video's tower is many steps' work: the watchdog sees it move
            groups.append(out)
        return mx.concatenate(groups, axis=0)[None]


def audio_tokens(frames: int) -> int:
    """The audio tower's output length for ``frames`` mel frames (each 100 frames give 13
    tokens; the remainder through its three stride-2 convolutions), as mlx-vlm counts it."""
    rest = frames % 100
    after = (rest - 1) // 2 + 1
    return ((after - 1) // 2 + 1 - 1) // 2 + 1 + frames // 100 * 13


def timestamped(wrapped: str, times: np.ndarray, pair: int, groups: int, per_frame: int) -> str:
    """Qwen3-VL's text for a video of ``groups`` groups of ``pair`` frames (the last frame
    repeated to fill the last group): each group's "<t.t seconds>" (the mean of its first
    and last frame's time) then its vision block of ``per_frame`` video tokens, as
    mlx-vlm's processor renders it."""
    video = wrapped[len(VISION_START): -len(VISION_END)]
    padded = list(times) + [times[-1]] * (-len(times) % pair)
    if len(padded) != groups * pair:
        raise ValueError(f"{len(times)} frames for {groups} groups of {pair}")
    return "".join(f"<{(padded[g * pair] + padded[g * pair + pair - 1]) / 2:.1f} seconds>" + VISION_START
                   + video * per_frame + VISION_END for g in range(groups))


def text_config_of(vlm, model_type: str) -> dict[str, Any]:
    """mlx-lm's config for the text side from the text config mlx-vlm resolved."""
    resolved = vlm.config.text_config
    if getattr(resolved, "rope_traditional", False):
        raise UnsupportedModel(f"{model_type} with traditional rope is not served")
    text_type, _, more = FAMILIES[model_type]
    out = {k: getattr(resolved, k) for k in (*_TEXT_FIELDS, *more)}
    out.update(model_type=text_type, rope_scaling=None)
    return out


def sections_of(vlm) -> list[int]:
    scaling = vlm.config.text_config.rope_scaling or {}
    sections = scaling.get("mrope_section")
    if not sections or len(sections) != 3:
        raise UnsupportedModel(f"{vlm.config.model_type} without three mrope_section sizes ({sections}) "
                               "is not served")
    return [int(s) for s in sections]


def load_qwen_vl(vlm, processor, path: Path, config: dict[str, Any]):
    """(mlx-lm qwen2 / qwen3 / qwen3_moe with M-RoPE, tokenizer, QwenVLTower) from mlx-vlm's
    loaded model (Qwen3-Omni: its thinker; the talker is not loaded)."""
    from ..mlx_typed import flatten

    model_type = config["model_type"]
    if model_type == "qwen3_omni_moe":
        if getattr(vlm, "has_talker", False):
            vlm.disable_talker()
        vlm = vlm.thinker
    text_config = text_config_of(vlm, model_type)
    weights = untie(dict(flatten(vlm.language_model.parameters())))
    text_config["tie_word_embeddings"] = "lm_head.weight" not in weights
    config["text_config"] = {**(config.get("text_config") or {}), **text_config}  # what traits read
    text = text_model(text_config, weights)
    vlm.language_model = None  # the text model holds those arrays now
    style = FAMILIES[model_type][1]
    if mrope.install(text, sections_of(vlm), float(text_config["rope_theta"]), style) != len(text.layers):
        raise UnsupportedModel("the text model's attention layers do not all take M-RoPE")
    deepstack = len(getattr(vlm.config.vision_config, "deepstack_visual_indexes", None) or ())
    if deepstack > len(text.layers):
        raise UnsupportedModel(f"{deepstack} DeepStack layers for a text model of {len(text.layers)}")
    mrope.install_deepstack(text.layers[:deepstack])
    tokenizer = tokenizer_for(path, config, text_config)
    image_id = int(vlm.config.image_token_id)
    processor_image_id = getattr(processor, "image_token_id", None)
    if processor_image_id is None:
        processor_image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    if processor_image_id != image_id:
        raise UnsupportedModel(f"the processor's image token {processor_image_id} is not the model's "
                               f"image token {image_id}")
    vision = vlm.config.vision_config
    image = processor.image_processor
    if image.merge_size != vision.spatial_merge_size or image.patch_size != vision.patch_size:
        raise UnsupportedModel(f"the processor's patches ({image.patch_size} px, merged {image.merge_size}) are "
                               f"not the tower's ({vision.patch_size} px, merged {vision.spatial_merge_size})")
    return text, tokenizer, QwenVLTower(vlm, image, image_id, int(vision.patch_size), 0,
                                        media_input="embeddings+positions", merge=int(vision.spatial_merge_size),
                                        video=video_input(vlm, processor, model_type in TIMESTAMPED)
                                        if model_type in VIDEO else None,
                                        audio=audio_support(vlm, processor) if model_type == "qwen3_omni_moe"
                                        else None)


def audio_support(thinker, processor) -> AudioSupport:
    """The thinker's feature extractor and audio token, checked against its audio tower."""
    extractor = processor.feature_extractor
    token = int(thinker.config.audio_token_id)
    if processor.tokenizer.convert_tokens_to_ids(processor.audio_token) != token:
        raise UnsupportedModel(f"the processor's audio token {processor.audio_token!r} is not the model's "
                               f"audio token {token}")
    if extractor.sampling_rate != SAMPLE_RATE or extractor.feature_size != thinker.config.audio_config.num_mel_bins:
        raise UnsupportedModel(f"the feature extractor's {extractor.feature_size} mel bins at "
                               f"{extractor.sampling_rate} Hz are not the audio tower's "
                               f"{thinker.config.audio_config.num_mel_bins} at {SAMPLE_RATE}")
    return AudioSupport(extractor, token, extractor.n_samples / extractor.sampling_rate)


def video_input(vlm, processor, timestamps: bool) -> VideoInput | None:
    """The model's video processor, token and sampling (mlx-vlm's defaults for it)."""
    from mlx_vlm.utils import resolve_video_sampling

    video, vision = getattr(processor, "video_processor", None), vlm.config.vision_config
    if video is None or getattr(vlm.config, "video_token_id", None) is None:
        return None
    if video.merge_size != vision.spatial_merge_size or video.patch_size != vision.patch_size \
            or video.temporal_patch_size != vision.temporal_patch_size:
        raise UnsupportedModel(f"the video processor's patches ({video.patch_size} px x {video.temporal_patch_size} "
                               f"frames, merged {video.merge_size}) are not the tower's")
    s = resolve_video_sampling(processor, {})  # the processor's own, then mlx-vlm's defaults: all set
    assert s.fps is not None and s.min_frames is not None and s.max_frames is not None and s.frame_factor
    sampling = Sampling(float(s.fps), int(s.min_frames), int(s.max_frames), int(s.frame_factor))
    if sampling.frame_factor % video.temporal_patch_size:
        raise UnsupportedModel(f"frames sampled in multiples of {sampling.frame_factor} for a temporal patch of "
                               f"{video.temporal_patch_size}")
    wrapped = None
    if timestamps:
        wrapped = f"{VISION_START}{processor.video_token}{VISION_END}"
        if getattr(processor, "vision_start_token", VISION_START) != VISION_START or \
                getattr(processor, "vision_end_token", VISION_END) != VISION_END:
            raise UnsupportedModel("the processor's vision markers are not Qwen's")
    return VideoInput(video, int(vlm.config.video_token_id), sampling, wrapped)
