"""What the facade checks and computes before it builds a request's ``CoreRequest`` (event
loop or preparation pool; no MLX): media and speculation it cannot honour, and a
prediction's tokens."""

from __future__ import annotations

from ...errors import InvalidRequest, Unsupported
from ...loading.model import LoadedModel
from ...requests import ChatPrompt, GenerationRequest, SpeculationMode
from ...validation import BYTES_PER_TOKEN, Limits, at_most, check_text_bytes, check_token_ids
from ..config import SpeculationConfig


def check_media(request: GenerationRequest, model: LoadedModel) -> None:
    """Images go to vision-language models only, videos and audio to those that take them
    (FAILED_PRECONDITION elsewhere)."""
    prompt = request.prompt
    if not isinstance(prompt, ChatPrompt) or not prompt.has_media:
        return
    if model.vision is None:
        raise Unsupported(f"model {model.name!r} does not take images, videos or audio; send text only, or use a "
                          "vision-language model")
    if prompt.has_videos and model.vision.video is None:
        raise Unsupported(f"model {model.name!r} does not take videos (GetModelInfo's capabilities.media.video); "
                          "send its frames as images, or use a model that takes video")
    if prompt.has_audio and model.vision.audio is None:
        raise Unsupported(f"model {model.name!r} does not take audio (GetModelInfo's capabilities.media.audio); "
                          "transcribe it first (Transcribe), or use a model that takes audio")


def check_speculation(request: GenerationRequest, config: SpeculationConfig, model: LoadedModel, has_draft: bool,
                      rolls_back: bool, limits: Limits) -> None:
    """Refuses speculation options the server cannot honour, and a prediction (before
    it is tokenized) that is too long, holds ids outside the vocabulary, or has no use."""
    asked = request.speculation
    if not 0 <= asked.num_draft_tokens <= config.max_draft_tokens:
        raise InvalidRequest("speculation.num_draft_tokens", f"must be between 0 and {config.max_draft_tokens}")
    if asked.mode is SpeculationMode.DRAFT and not has_draft:
        raise Unsupported(f"model {model.name!r} is served without a draft model; start the server with "
                          "--draft-model, or use SPECULATION_MODE_NGRAM")
    p = request.prediction
    if p is None:
        return
    if asked.mode is SpeculationMode.OFF:
        raise InvalidRequest("prediction", "is verified as speculative drafts, which speculation.mode OFF turns "
                                           "off; send no prediction, or leave the mode unset")
    if not rolls_back:
        raise Unsupported(f"model {model.name!r} does not speculate (its caches cannot roll back), so it takes no "
                          "prediction")
    at_most("prediction.tokens.ids", len(p.token_ids), limits.max_prediction_tokens, "token ids")
    check_token_ids("prediction.tokens.ids", p.token_ids, model.vocab_size)
    if p.text is not None:
        check_text_bytes("prediction.text", (p.text,), limits.max_prediction_tokens * BYTES_PER_TOKEN)


def prediction_ids(request: GenerationRequest, tokenizer, limits: Limits) -> tuple[int, ...]:
    """The prediction's tokens (text without special tokens); blocking."""
    p = request.prediction
    if p is None or p.text is None:
        return p.token_ids if p is not None else ()
    ids = tuple(tokenizer.encode(p.text, add_special_tokens=False))
    at_most("prediction.text", len(ids), limits.max_prediction_tokens, "tokens")
    return ids
