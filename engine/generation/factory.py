"""Building a request's ``Sequence`` (on the event loop, before submission; no MLX work)."""

from __future__ import annotations

from ..loading.model import LoadedModel
from ..requests import GenerationRequest
from .delivery import Delivery
from .detokenizer import IncrementalDetokenizer
from .prompts import EncodedPrompt
from .sampling import SamplingState
from .sequence import Reuse, Sequence
from .stopping import StopStringMatcher, TokenStopRule
from .streams import Stream


def make_sequence(model: LoadedModel, request: GenerationRequest, stream: Stream, prompt: EncodedPrompt,
                  max_tokens: int, arrived: float, *, adapter: str = "") -> Sequence:
    s = request.stopping
    ids = list(prompt.ids)
    rule = TokenStopRule(max_tokens, s.min_tokens, model.eos_ids, frozenset(s.stop_token_ids), s.ignore_eos)
    detokenizer = IncrementalDetokenizer(lambda t: model.tokenizer.decode(t), ids)
    delivery = Delivery(stream.request_id, model.name, stream.sink, detokenizer, StopStringMatcher(s.stop), arrived)
    wants_logprobs = request.logprobs or request.top_logprobs > 0
    return Sequence(
        request_id=stream.request_id, tokens=ids, prompt_len=len(ids), context_tokens=len(ids) + max_tokens,
        rule=rule, sampling=SamplingState(request.sampling, ids), delivery=delivery,
        reuse=Reuse(not request.bypass_prefix_cache, prompt.snapshot_at),
        top_logprobs=request.top_logprobs if wants_logprobs else None, adapter=adapter)
