"""A speech-to-text model: mlx-audio's Whisper on a local directory, transcribing as
mlx-audio's own ``generate`` does (30-second windows, each conditioned on the text before
it, segment timestamps from the timestamp tokens).

Invariants: the model is loaded and run on its engine thread only, its floating weights in
the runtime dtype (``load_whisper``); decoding is greedy with no temperature fallback (so
one file always gives one transcript, the one mlx-audio gives with ``temperature=0`` at
that dtype); each encoder and decoder block is evaluated on its own and tells the watchdog
the thread moves, and a transcription whose ``stop`` is set ends there (``Interrupted``),
so a cancelled one frees the thread within one block; the tokenizer is Hugging Face's from
the directory.
"""

from __future__ import annotations

import json
import threading
from contextvars import ContextVar
from pathlib import Path

import numpy as np

from ..errors import InvalidRequest, UnsupportedModel
from ..layering import CHECKPOINT, install
from ..liveness import still_working
from .audio import SAMPLE_RATE
from .types import Segment, Transcript, TranscriptionRequest, TranscriptionTask

FAMILIES = ("whisper",)
_STOP: ContextVar[threading.Event | None] = ContextVar("speech_stop", default=None)


class Interrupted(Exception):
    """A transcription stopped between two blocks because its caller left."""


def is_speech_config(config: dict) -> bool:
    return config.get("model_type") in FAMILIES


class _Moving:
    """A block that evaluates its output and tells the watchdog the thread still moves: a
    window's encoding or decoding is many blocks, and on a CPU a large model's window runs
    longer than the stall timeout."""

    RANK = CHECKPOINT

    def __call__(self, *args, **kwargs):
        import mlx.core as mx

        out = super().__call__(*args, **kwargs)  # a mixin over the block's class
        mx.eval(out[0] if isinstance(out, tuple) else out)
        still_working()
        stop = _STOP.get()
        if stop is not None and stop.is_set():
            raise Interrupted("the transcription's caller left")
        return out


def load_whisper(path: Path, dtype: str = "auto"):
    """mlx-audio's Whisper for the directory, its floating weights in the runtime dtype
    (float32 on a CPU, where float16 runs several times slower)."""
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_audio.stt.utils import load_model

    from ..hardware.device import runtime_dtype

    model = load_model(Path(path))
    want = runtime_dtype(dtype)
    if want is not None and model.dtype != want:
        model.update(tree_map(lambda a: a.astype(want) if mx.issubdtype(a.dtype, mx.floating) else a,
                              model.parameters()))
        model.dtype = want
    return model


class SpeechModel:
    def __init__(self, path: Path):
        config_path = Path(path) / "config.json"
        try:
            config = json.loads(config_path.read_text())
        except (OSError, ValueError) as exc:
            raise UnsupportedModel(f"{path} has no readable config.json: {exc}") from None
        if not is_speech_config(config):
            raise UnsupportedModel(f"speech models of type {config.get('model_type')!r} are not served; "
                                   f"served: {', '.join(FAMILIES)}")
        self.model = load_whisper(Path(path))
        for block in (*self.model.encoder.blocks, *self.model.decoder.blocks):
            install(block, _Moving)
        if getattr(self.model, "_processor", None) is None:
            raise UnsupportedModel(f"{path} has no Whisper processor files (tokenizer and preprocessor_config.json)")
        self.tokenizer = self.model._processor.tokenizer
        dims = self.model.dims
        self.vocab_size = int(dims.n_vocab)
        self.max_length = int(dims.n_text_ctx)  # tokens one window's decoder holds, its prompt included
        self.multilingual = bool(self.model.is_multilingual)
        self.dtype = str(self.model.dtype).removeprefix("mlx.core.")

    @property
    def languages(self) -> tuple[str, ...]:
        """The language codes a request may name."""
        from mlx_audio.stt.models.whisper.tokenizer import LANGUAGES

        return tuple(list(LANGUAGES)[: self.model.num_languages]) if self.multilingual else ("en",)

    def weights_bytes(self) -> int:
        from ..mlx_typed import flatten

        return sum(v.nbytes for _, v in flatten(self.model.parameters()))

    def check(self, request: TranscriptionRequest) -> None:
        """The language and task the model can honour, and a prompt that fits its window."""
        if request.language and request.language not in self.languages:
            shown = ", ".join(self.languages[:12]) + (", ..." if len(self.languages) > 12 else "")
            raise InvalidRequest("language", f"{request.language!r} is not one of the model's languages ({shown})")
        if request.task is TranscriptionTask.TRANSLATE and not self.multilingual:
            raise InvalidRequest("task", "an English-only model does not translate")
        if request.prompt and len(self.tokenizer.encode(request.prompt, add_special_tokens=False)) > \
                self.max_length // 2 - 1:
            raise InvalidRequest("prompt", f"is longer than {self.max_length // 2 - 1} tokens, half the model's "
                                           "window")

    def transcribe(self, samples: np.ndarray, request: TranscriptionRequest,
                   stop: threading.Event | None = None) -> Transcript:
        """The transcript of ``samples`` (16 kHz mono float32); engine thread. Interrupted once
        ``stop`` is set, at the next block's end."""
        import mlx.core as mx

        token = _STOP.set(stop)
        try:
            out = self.model.generate(mx.array(samples), language=request.language or None,
                                      task=request.task.value, temperature=0.0,
                                      initial_prompt=request.prompt or None, verbose=None,
                                      fp16=self.model.dtype == mx.float16)
        finally:
            _STOP.reset(token)
        segments = tuple(Segment(i, float(s["start"]), float(s["end"]), str(s["text"]),
                                 tuple(int(t) for t in s["tokens"]), float(s["avg_logprob"]),
                                 float(s["no_speech_prob"]), float(s["compression_ratio"]))
                         for i, s in enumerate(out.segments or ()))
        return Transcript(str(out.language or request.language or "en"), str(out.text), segments,
                          len(samples) / SAMPLE_RATE)

    def tokenize(self, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return ids, self.tokenizer.convert_ids_to_tokens(ids)

    def detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
