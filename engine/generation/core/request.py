"""A generation request as it crosses into the engine thread, and the sequences the thread
builds from it.

Invariants: a ``CoreRequest`` is immutable data the frontend finished preparing (the API
request, its prompt's ids, its compiled constraints, its tokenized words); its events leave
only through its ``outbox`` (``serving.protocol.Outbox``); its ``SequenceState`` objects are
built and touched on the engine thread alone. Choice i of a request of n choices is seeded
``seed + i`` when the request is seeded."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...events import Finished, FinishReason, Timings, Usage
from ...loading.model import LoadedModel
from ...requests import GenerationRequest, SamplingOptions, SpeculationMode
from ...serving.protocol import Outbox
from ...vision.prompt import PromptImage
from ...vision.splice import ImageRows
from ..config import SpeculationConfig
from ..grammar.constraint import Constraint
from .sampling.sampler import SamplingState
from .sampling.words import SamplingTokens
from .sequence.delivery import Delivery, IncrementalDetokenizer
from .sequence.state import PrefixOptions, SequenceState
from .sequence.stopping import StopStringMatcher, TokenStopRule
from .speculation.policy import Speculation


@dataclass(frozen=True)
class EncodedPrompt:
    ids: list[int]
    snapshot_at: int | None = None  # end of a chat's history inside ``ids``
    opens_reasoning: bool = False  # the generation prompt left the model's thinking open
    images: tuple[PromptImage, ...] = ()  # an image chat's runs of image positions in ``ids``


@dataclass(frozen=True)
class CoreRequest:
    key: str  # the engine thread's id of the request (Streams.open)
    request_id: str  # the caller's, for its events
    request: GenerationRequest  # after the chat plan
    prompt: EncodedPrompt
    max_tokens: int
    arrived: float  # perf_counter() when the facade took it
    model: LoadedModel
    outbox: Outbox
    speculation: SpeculationConfig = SpeculationConfig()
    words: SamplingTokens = SamplingTokens()  # the request's texts the sampler reads, tokenized
    constraints: tuple[Constraint | None, ...] = (None,)  # one per choice
    adapter: str = ""
    prediction: tuple[int, ...] = ()

    def finish(self, reason: FinishReason, *, error: str = "") -> None:
        """Ends every choice of a request the thread never read (it died first)."""
        for choice in range(self.request.n):
            self.outbox(Finished(reason, Usage(len(self.prompt.ids), 0, 0), Timings(0.0, 0.0, 0.0, 0.0),
                                 error=error, choice=choice))

    def sequences(self) -> SequenceState:
        """Choice 0's sequence, its siblings (choices 1..n-1) forking from its prompt's KV."""
        seq, *siblings = (self._sequence(choice) for choice in range(self.request.n))
        seq.siblings = siblings
        return seq

    def _sequence(self, choice: int) -> SequenceState:
        request, model, s = self.request, self.model, self.request.stopping
        ids = list(self.prompt.ids)
        rule = TokenStopRule(self.max_tokens, s.min_tokens, model.eos_ids, frozenset(s.stop_token_ids), s.ignore_eos)
        detokenizer = IncrementalDetokenizer(lambda t: model.tokenizer.decode(t), ids)
        delivery = Delivery(self.request_id, model.name, self.outbox, detokenizer, StopStringMatcher(s.stop),
                            self.arrived, choice)
        wants_logprobs = request.logprobs or request.top_logprobs > 0
        return SequenceState(
            key=self.key, tokens=ids, prompt_len=len(ids), context_tokens=len(ids) + self.max_tokens,
            rule=rule, sampling=SamplingState(choice_sampling(request.sampling, choice), ids, self.words),
            delivery=delivery,
            prefix=PrefixOptions(not request.bypass_prefix_cache, self.prompt.snapshot_at, request.session_id),
            images=ImageRows(self.prompt.images, len(ids)) if self.prompt.images else None,
            top_logprobs=request.top_logprobs if wants_logprobs else None,
            prompt_logprobs=request.prompt_logprobs,  # scored by the prefill its choices share
            speculation=speculation_for(request, self.speculation, self.prediction),
            constraint=self.constraints[choice], adapter=self.adapter,
            tenant=request.tenant, priority=request.priority, choice=choice)


def choice_sampling(sampling: SamplingOptions, choice: int) -> SamplingOptions:
    """Choice ``choice``'s options: the request's, seeded ``seed + choice`` when seeded."""
    if choice == 0 or sampling.seed is None:
        return sampling
    return dataclasses.replace(sampling, seed=sampling.seed + choice)


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
