"""What the facade refuses at once, before queueing: a full model, a context that never
fits memory, a ``max_tokens`` past the context. Event loop only."""

from __future__ import annotations

from ...errors import DoesNotFit, InvalidRequest, QueueFull
from ...memory.budget import MemoryBudget
from ...requests import GenerationRequest
from ..config import SchedulerConfig


def check_queue_room(open_requests: int, config: SchedulerConfig, model: str, choices: int = 1) -> None:
    """QueueFull when ``open_requests`` (sequences: a request of n choices counts n) and ``choices``
    more would pass ``max_active + max_queued``; InvalidRequest when ``choices`` alone would."""
    if choices > config.max_active + config.max_queued:  # never admitted, however long it waits
        raise InvalidRequest("n", f"{choices} choices exceed what model {model!r} admits at once "
                                  f"({config.max_active} running and {config.max_queued} waiting)")
    if open_requests + choices > config.max_active + config.max_queued:
        raise QueueFull(f"the queue of model {model!r} is full ({config.max_queued} waiting); retry later",
                        retry_after_s=1.0)


def check_ever_fits(budget: MemoryBudget | None, context_tokens: int, choices: int = 1) -> None:
    """DoesNotFit (with the plan's figures) for a context that never fits memory (``choices`` of it)."""
    if budget is not None and not budget.would_ever_fit(context_tokens, choices):
        which = f"a context of {context_tokens} tokens" if choices == 1 else (
            f"{choices} choices of a context of {context_tokens} tokens each")
        raise DoesNotFit(
            f"{which} can never fit in memory: at most {budget.max_context} "
            f"tokens fit beside {budget.facts.weights_bytes} bytes of weights in {budget.usable_bytes} "
            "usable bytes",
            metadata={"context_tokens": str(context_tokens), "max_safe_context": str(budget.max_context),
                      "weights_bytes": str(budget.facts.weights_bytes),
                      "usable_bytes": str(budget.usable_bytes), "reserve_bytes": str(budget.reserve_bytes)})


def max_tokens_for(request: GenerationRequest, prompt_tokens: int, context_length: int,
                   budget: MemoryBudget | None, cap: int) -> int:
    """The request's max_tokens if it fits the context (else InvalidRequest); unset: what
    memory allows, at least 1, at most ``cap``."""
    room = context_length - prompt_tokens
    asked = request.stopping.max_tokens
    fits = budget.max_context if budget is not None else None
    if asked is None and fits is not None:
        room = min(room, max(fits - prompt_tokens, 1))
    if asked is not None and asked > room:
        raise InvalidRequest("stopping.max_tokens",
                             f"{asked} tokens after a {prompt_tokens}-token prompt exceed the "
                             f"context length {context_length}")
    return asked if asked is not None else min(room, cap)
