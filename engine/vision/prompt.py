"""An image chat's token ids: each image's (video's, audio file's) placeholder, as the chat template renders it,
expanded to the image's runs of image-token positions (llava: the placeholder token in
the ids, one run; gemma3, idefics3: the placeholder in the text, replaced by the
processor's own text for that image before tokenizing, as its processor does; an
idefics3 image is one run per tile, with the processor's markers between them).

Invariants: the placeholders in the rendered prompt are exactly the request's images and
videos and audio files, in order, each of its own kind (a video or an audio file is one run,
on the models that take it), and every image-token id of the result lies in one of its image's runs, whose
lengths are the ones the image was processed to (a placeholder, image token or marker
typed as text, or a template that drops one, is refused); an image's span runs from its
first run's start to its last run's end and never reaches the prompt's last token, which
the batch feeds as a token; each image keeps the digest of its bytes, which keys its
span in the prefix cache.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..errors import InvalidRequest
from ..requests import AudioPart, ChatPrompt, ImagePart, MediaPart, VideoPart
from ..speech.audio import SAMPLE_RATE
from .audio import decode_audio
from .images import decode, image_parts
from .model import ProcessedImage, VisionTower
from .video import decode as decode_video


@dataclass(frozen=True, eq=False)
class PromptImage:
    """One image of a prompt: its span of positions and its processed pixels."""

    start: int
    length: int  # the span: first run's start to last run's end
    pixels: np.ndarray  # what the tower reads for this one image (leading axis 1) or video (its frame pairs)
    digest: bytes  # SHA-256 of the encoded image: what the prefix cache keys its positions by
    # (offset in the span, length) of each run of feature positions; () is one run: the span
    runs: tuple[tuple[int, int], ...] = ()
    grid: tuple[int, int, int] | None = None  # (t, h, w) of its multi-axis positions (M-RoPE models)
    audio: bool = False  # an audio file: ``pixels`` are its mel features, its positions text positions

    @property
    def end(self) -> int:
        return self.start + self.length

    @property
    def feature_runs(self) -> tuple[tuple[int, int], ...]:
        return self.runs or ((0, self.length),)

    @property
    def features(self) -> int:
        """Positions that take the tower's features (the span less any markers)."""
        return sum(n for _, n in self.feature_runs)


def expand_images(text: str, tokenizer, prompt: ChatPrompt, tower: VisionTower, limits
                  ) -> tuple[list[int], tuple[PromptImage, ...]]:
    """(token ids of the rendered ``text`` with its images' and videos' runs, the runs);
    decodes and processes every image and video (blocking)."""
    if tower.placeholder_text is not None:
        return _expand_text(text, tokenizer, prompt, tower, limits)
    parts = list(media_parts(prompt))
    processed: list[ProcessedImage | None] = [None] * len(parts)
    _process_audio(parts, processed, tower, limits)
    if tower.video is not None and tower.video.wrapped is not None:  # videos expanded in the text (Qwen3-VL)
        text = _expand_videos(text, parts, processed, tower, limits)
    ids = tokenizer.encode(text, add_special_tokens=False)
    kinds: dict[int, type] = {tower.image_token_id: ImagePart}
    if tower.video is not None:
        kinds[tower.video.token_id] = VideoPart
    if tower.audio is not None:
        kinds[tower.audio.token_id] = AudioPart
    marks = deque(i for i, t in enumerate(ids) if t in kinds)  # every image and video token
    _check_count(len(marks) - sum(sum(p.runs) - 1 for p in processed if p is not None and p.text is not None),
                 len(parts))
    out: list[int] = []
    images: list[PromptImage] = []
    i = 0
    for k, (field, part) in enumerate(parts):
        mark = marks[0]
        token = ids[mark]
        if not isinstance(part, kinds[token]):
            raise InvalidRequest("chat.messages", "the rendered prompt's image, video and audio placeholders are "
                                                  "not in the order of the parts (is one typed as text?)")
        p = processed[k] or _processed(field, part, tower, limits)
        out += ids[i:mark]
        digest = hashlib.sha256(part.data + p.salt).digest()
        if p.text is None:  # one placeholder token, expanded to the item's run here
            marks.popleft()
            (n,) = p.runs
            images.append(PromptImage(len(out), n, p.pixels, digest, grid=p.grid, audio=p.audio))
            out += [token] * n
            i = mark + 1
            continue
        spans = []  # expanded in the text: the item's runs of tokens follow, in order
        for n in p.runs:
            first = marks[0] if marks else -1
            if [marks.popleft() for _ in range(min(n, len(marks)))] != list(range(first, first + n)) \
                    or ids[first] != token or (marks and marks[0] == first + n):
                raise InvalidRequest("chat.messages", "the prompt's video tokens do not form the video's runs "
                                                      "(is a video token typed as text?)")
            spans.append((first - mark, n))
        end = mark + spans[-1][0] + spans[-1][1]
        images.append(PromptImage(len(out), end - mark, p.pixels, digest, tuple(spans), grid=p.grid))
        out += ids[mark:end]
        i = end
    out += ids[i:]
    if images and images[-1].end >= len(out):
        raise InvalidRequest("chat.messages", "the prompt must not end with an image")
    return out, tuple(images)


def _expand_videos(text: str, parts, processed: list, tower: VisionTower, limits) -> str:
    """``text`` with each video's wrapped placeholder replaced by its processed text;
    fills ``processed`` for the videos."""
    assert tower.video is not None and tower.video.wrapped is not None
    pieces = text.split(tower.video.wrapped)
    videos = [k for k, (_, part) in enumerate(parts) if isinstance(part, VideoPart)]
    if len(pieces) - 1 != len(videos):
        raise InvalidRequest("chat.messages", f"the rendered prompt holds {len(pieces) - 1} video placeholders "
                                              f"for {len(videos)} videos (is a video token typed as text?)")
    texts = []
    for k in videos:
        field, part = parts[k]
        processed[k] = p = _processed(field, part, tower, limits)
        texts.append(_text_of(p))
    return pieces[0] + "".join(t + piece for t, piece in zip(texts, pieces[1:]))


_NAMES = {ImagePart: "image", VideoPart: "video", AudioPart: "audio"}


def media_parts(prompt: ChatPrompt) -> Iterator[tuple[str, MediaPart]]:
    """Each image, video and audio file of ``prompt`` with its field path, in prompt order."""
    for i, message in enumerate(prompt.messages):
        for j, part in enumerate(message.parts):
            if isinstance(part, (ImagePart, VideoPart, AudioPart)):
                yield f"chat.messages[{i}].parts[{j}].{_NAMES[type(part)]}", part


def _processed(field: str, part: MediaPart, tower: VisionTower, limits) -> ProcessedImage:
    if isinstance(part, ImagePart):
        return tower.process(decode(f"{field}.data", part, limits))
    assert tower.video is not None and isinstance(part, VideoPart)  # audio is processed beforehand
    return tower.process_video(*decode_video(field, part, limits, tower.video.sampling))


def _process_audio(parts, processed: list, tower: VisionTower, limits) -> None:
    """Fills ``processed`` for the audio files, decoded one by one and extracted together."""
    heard = [k for k, (_, part) in enumerate(parts) if isinstance(part, AudioPart)]
    if not heard or tower.audio is None:
        return
    files = []
    for k in heard:
        field = parts[k][0]
        samples = decode_audio(field, parts[k][1], limits)
        if len(samples) > tower.audio.max_seconds * SAMPLE_RATE:
            raise InvalidRequest(f"{field}.data", f"{len(samples) / SAMPLE_RATE:.1f} seconds; the model reads at most "
                                                  f"{tower.audio.max_seconds:g} seconds of one audio file")
        files.append(samples)
    for k, p in zip(heard, tower.process_audio(files)):
        processed[k] = p


def _text_of(image: ProcessedImage) -> str:
    assert image.text is not None  # a tower with placeholder text gives each image its text
    return image.text


def _check_count(found: int, images: int) -> None:
    if found != images:
        raise InvalidRequest("chat.messages", f"the rendered prompt holds {found} media placeholders for "
                                              f"{images} images, videos and audio files (is an image token typed "
                                              "as text?)")


def _expand_text(text: str, tokenizer, prompt: ChatPrompt, tower: VisionTower, limits
                 ) -> tuple[list[int], tuple[PromptImage, ...]]:
    parts = list(image_parts(prompt))
    pieces = text.split(tower.placeholder_text)
    _check_count(len(pieces) - 1, len(parts))
    if tower.markers is not None and tower.markers.search(text):
        raise InvalidRequest("chat.messages", "the prompt holds an image marker typed as text")
    processed = [tower.process(decode(f"{field}.data", part, limits)) for field, part in parts]
    expanded = pieces[0] + "".join(_text_of(p) + piece for p, piece in zip(processed, pieces[1:]))
    ids = tokenizer.encode(expanded, add_special_tokens=False)
    runs = _runs(ids, tower.image_token_id)
    images: list[PromptImage] = []
    if len(runs) == sum(len(p.runs) for p in processed):
        for p, (_, part) in zip(processed, parts):
            mine, runs = runs[:len(p.runs)], runs[len(p.runs):]
            if [n for _, n in mine] != list(p.runs):
                break
            start = mine[0][0]
            spans = tuple((s - start, n) for s, n in mine) if len(mine) > 1 else ()
            images.append(PromptImage(start, mine[-1][0] + mine[-1][1] - start, p.pixels,
                                      hashlib.sha256(part.data).digest(), spans))
    if len(images) != len(parts):
        raise InvalidRequest("chat.messages", "the prompt's image tokens do not form the images' runs "
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
