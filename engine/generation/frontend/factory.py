"""Building a request's ``SequenceState`` (on the event loop, before submission; no MLX work).
Choice i of a request of n choices is seeded ``seed + i`` when the request is seeded."""

from __future__ import annotations

import dataclasses

from ...errors import InvalidRequest, Unsupported
from ...loading.model import LoadedModel
from ...requests import ChatPrompt, GenerationRequest, SamplingOptions, SpeculationMode
from ...validation import BYTES_PER_TOKEN, Limits, at_most, check_text_bytes, check_token_ids
from ...vision.splice import ImageRows
from ..config import SpeculationConfig
from ..core.sampling.sampler import SamplingState
from ..core.sampling.words import sampling_tokens
from ..core.sequence.delivery import Delivery, IncrementalDetokenizer
from ..core.sequence.state import PrefixOptions, SequenceState
from ..core.sequence.stopping import StopStringMatcher, TokenStopRule
from ..core.speculation.policy import Speculation
from ..grammar.constraint import Constraint
from .prompts import EncodedPrompt
from .streams import Stream


def make_sequence(model: LoadedModel, request: GenerationRequest, stream: Stream, prompt: EncodedPrompt,
                  max_tokens: int, arrived: float, speculation: SpeculationConfig = SpeculationConfig(),
                  constraint: Constraint | None = None, *, adapter: str = "", choice: int = 0,
                  prediction: tuple[int, ...] = ()) -> SequenceState:
    s = request.stopping
    ids = list(prompt.ids)
    rule = TokenStopRule(max_tokens, s.min_tokens, model.eos_ids, frozenset(s.stop_token_ids), s.ignore_eos)
    detokenizer = IncrementalDetokenizer(lambda t: model.tokenizer.decode(t), ids)
    delivery = Delivery(stream.request_id, model.name, stream.sink, detokenizer, StopStringMatcher(s.stop), arrived,
                        choice)
    wants_logprobs = request.logprobs or request.top_logprobs > 0
    return SequenceState(
        key=stream.key, tokens=ids, prompt_len=len(ids), context_tokens=len(ids) + max_tokens,
        rule=rule, sampling=SamplingState(choice_sampling(request.sampling, choice), ids, sampling_tokens(
            request.sampling, lambda text: model.tokenizer.encode(text, add_special_tokens=False))),
        delivery=delivery,
        prefix=PrefixOptions(not request.bypass_prefix_cache, prompt.snapshot_at, request.session_id),
        images=ImageRows(prompt.images, len(ids)) if prompt.images else None,
        top_logprobs=request.top_logprobs if wants_logprobs else None,
        prompt_logprobs=request.prompt_logprobs,  # scored by the prefill its choices share
        speculation=speculation_for(request, speculation, prediction), constraint=constraint, adapter=adapter,
        tenant=request.tenant, priority=request.priority, choice=choice)


def choice_sampling(sampling: SamplingOptions, choice: int) -> SamplingOptions:
    """Choice ``choice``'s options: the request's, seeded ``seed + choice`` when seeded."""
    if choice == 0 or sampling.seed is None:
        return sampling
    return dataclasses.replace(sampling, seed=sampling.seed + choice)


def check_media(request: GenerationRequest, model: LoadedModel) -> None:
    """Images go to vision-language models only (FAILED_PRECONDITION elsewhere)."""
    prompt = request.prompt
    if isinstance(prompt, ChatPrompt) and prompt.has_images and model.vision is None:
        raise Unsupported(f"model {model.name!r} does not take images; send text only, or use a "
                          "vision-language model")


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


def speculation_for(request: GenerationRequest, config: SpeculationConfig,
                    prediction: tuple[int, ...] = ()) -> Speculation | None:
    """The request's own mode and width, or the server's defaults, and its prediction;
    None: off. Off for mirostat: its ``mu`` follows each committed token, so a
    verification site could not know it; the output is the same either way, speculation
    only changes how fast."""
    if request.sampling.mirostat is not None:
        return None
    asked = request.speculation
    mode = config.mode if asked.mode is SpeculationMode.DEFAULT else asked.mode
    width = asked.num_draft_tokens or config.num_draft_tokens
    if width <= 0:
        mode = SpeculationMode.OFF
    if mode is SpeculationMode.OFF and not prediction:
        return None
    return Speculation.create(mode, width, prediction, asked.num_draft_tokens or config.prediction_draft_tokens,
                              config.grammar_proposals and mode is not SpeculationMode.OFF)
