"""One request's state: one token list and how far its KV has got, ``cached <= computed
<= len(tokens)``. Once submitted, only the engine thread touches it. A request of n choices
is choice 0 holding choices 1..n-1 as ``siblings`` until its first decode step: they share
its fate until then (``finish`` ends them too), then draw their first tokens from that step's
scores and take a copy of its prompt's KV."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

from ....events import FinishReason, TokenLogprob, Usage
from ....tenancy import ANONYMOUS, Tenant
from ...grammar.constraint import Constraint
from ..sampling.sampler import SamplingState
from ..speculation.policy import Speculation
from .delivery import Delivery
from .stopping import TokenStop, TokenStopRule


class Status(enum.Enum):
    WAITING = "waiting"
    PREFILLING = "prefilling"
    DECODING = "decoding"
    FINISHED = "finished"


@dataclass(frozen=True)
class PrefixOptions:
    enabled: bool = True
    snapshot_at: int | None = None  # prompt boundary worth storing (a chat's history)
    session: str = ""  # the request's session id: its entries keep affinity until the session closes


@dataclass(eq=False)
class SequenceState:
    key: str  # the engine thread's id of its request: id, tenant and a serial (Streams.open)
    tokens: list[int]
    prompt_len: int
    context_tokens: int  # prompt + most output: what memory is held for
    rule: TokenStopRule
    sampling: SamplingState
    delivery: Delivery
    prefix: PrefixOptions = PrefixOptions()  # the request's terms for the prefix cache
    top_logprobs: int | None = None  # None: no logprobs; n: the chosen one and n alternatives
    prompt_logprobs: int | None = None  # None: none; k: every prompt token's and k alternatives (from prefill)
    prompt_records: list[TokenLogprob] = field(default_factory=list)  # prompt logprobs so far, until sent
    speculation: Speculation | None = None
    adapter: str = ""  # adapter key ("": the base model)
    tenant: Tenant = ANONYMOUS
    priority: int = 0  # higher starts first
    status: Status = Status.WAITING
    cached: int = 0
    computed: int = 0
    caches: list[Any] | None = None  # its own caches while prefilling only
    cancelled: bool = False
    finish_reason: FinishReason | None = None
    constraint: Constraint | None = None
    images: Any = None  # an image prompt's ImageRows (engine.vision.splice), until it leaves prefill
    choice: int = 0  # which of its request's n choices
    siblings: list["SequenceState"] = field(default_factory=list)  # choice 0's choices 1..n-1, until they fork

    @property
    def prompt(self) -> list[int]:
        return self.tokens[: self.prompt_len]

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def pending(self) -> list[int]:
        return self.tokens[self.computed :]

    @property
    def step(self) -> int:
        """Index of the output token the next choice produces (keys seeded draws)."""
        return self.num_output

    @property
    def choices(self) -> list["SequenceState"]:
        """This sequence and the siblings it still holds."""
        return [self, *self.siblings]

    @property
    def memory_key(self) -> str:
        """The key of its memory reservation (its choices share ``key``)."""
        return self.key if self.choice == 0 else f"{self.key}\x1f#{self.choice}"

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    @property
    def storable(self) -> bool:
        """Finished normally: worth storing for reuse."""
        return self.prefix.enabled and self.finish_reason in (
            FinishReason.LENGTH, FinishReason.STOP, FinishReason.EOS)

    def start(self, cached: int) -> None:
        self.cached = self.computed = cached
        self.status = Status.PREFILLING
        self.delivery.started(self.prompt_len, cached)

    def accept(self, chosen: Sequence[int], logprobs: Sequence[TokenLogprob] = ()) -> int:
        """One Delta of chosen tokens up to the one that ends it; returns how many were appended."""
        ids: list[int] = []
        text: list[str] = []
        end: dict[str, Any] | None = None
        for i, token in enumerate(chosen):
            self.delivery.mark_token()
            count = self.num_output + 1
            if self.constraint is not None and (end := _constrained_end(self.constraint, token)) is not None:
                break
            verdict = self.rule.check(token, count)
            if verdict is not TokenStop.CONTINUE:
                end = ({"reason": FinishReason.EOS} if verdict is TokenStop.EOS
                       else {"reason": FinishReason.STOP, "stop_token_id": token})
                break
            self.tokens.append(token)
            self.sampling.commit(token)
            ids.append(token)
            piece, stop = self.delivery.text(token, self.rule.active(count))
            text.append(piece)
            if stop is not None:
                end = {"reason": FinishReason.STOP, "stop_sequence": stop, "flush": False}
                break
            if self.constraint is not None and self.constraint.done:  # nothing else allowed
                end = {"reason": FinishReason.STOP}
                break
            if self.rule.is_last(count):
                end = {"reason": FinishReason.LENGTH}
                break
        self.delivery.delta(ids, "".join(text), logprobs[: len(ids)])
        if end is not None:
            self.finish(**end)
        return len(ids)

    def finish(self, reason: FinishReason, *, stop_sequence: str = "", stop_token_id: int | None = None,
               error: str = "", flush: bool = True) -> None:
        """Idempotent; its caches are the scheduler's to free or store. Siblings not yet forked end too."""
        if not self.finished:
            self.status = Status.FINISHED
            self.finish_reason = reason
            self.delivery.finish(reason, self.usage(), stop_sequence=stop_sequence,
                                 stop_token_id=stop_token_id, error=error,
                                 flush=flush and reason not in (FinishReason.CANCELLED, FinishReason.ERROR))
        for sibling in self.siblings:
            sibling.finish(reason, error=error)

    def usage(self) -> Usage:
        spec, predicted = self.speculation, self.speculation and self.speculation.predicted
        return Usage(self.prompt_len, self.num_output, self.cached, spec.proposed if spec else 0,
                     spec.accepted if spec else 0, predicted.accepted if predicted else 0,
                     predicted.proposed - predicted.accepted if predicted else 0)


def _constrained_end(constraint: Constraint, token: int) -> dict[str, Any] | None:
    """The finish at ``token`` before emitting it; None after consuming an allowed token."""
    if constraint.ends(token):
        return {"reason": FinishReason.STOP}
    if not constraint.consume(token):
        return {"reason": FinishReason.ERROR, "error": f"response_format: {constraint.error or 'token refused'}"}
    return None


log = logging.getLogger("engine.generation.core.sequence.state")


def failure_message(exc: BaseException) -> str:
    """What the request's Finished event says (the client sees a generic INTERNAL)."""
    return f"engine failure: {type(exc).__name__}"


def end_row(seq: SequenceState, exc: BaseException, during: str) -> None:
    """A row's own failure ends that sequence alone with ERROR; the others go on."""
    log.error("request %s failed during %s; ending it alone", seq.delivery.request_id, during, exc_info=exc)
    try:
        seq.finish(FinishReason.ERROR, error=failure_message(exc))
    except Exception:  # its delivery is what broke; it still leaves the batch
        log.exception("request %s: its Finished event could not be sent", seq.delivery.request_id)
        seq.status, seq.finish_reason = Status.FINISHED, FinishReason.ERROR
