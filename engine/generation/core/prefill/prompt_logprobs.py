"""Prompt logprobs: the log probability of every prompt token but the first, with its top
alternatives, of the unmodified distribution (as generated tokens' logprobs are).

Position ``p``'s scores give prompt token ``p + 1``; prefill runs positions ``0 .. n-2`` (the
last prompt token is the batch's to feed), so its chunks cover tokens ``1 .. n-1`` exactly once,
in order. Each chunk's scores [chunk, V] are reduced to (logprob, top-k) per position in the same
evaluation as the chunk's KV and read to host records right away: no [prompt, vocab] array is
kept, and a scored chunk is at most ``SCORED_CHUNK`` positions. A request asking for them prefills
alone and from its first token (a cached prefix holds KV, not scores); its records are sent once,
when its prefill ends, after its Started."""

from __future__ import annotations

from typing import Callable

import mlx.core as mx

from ..sampling.logprobs import LogprobArrays, logprobs, to_events
from ..sequence.state import SequenceState

__all__ = ["LogprobArrays", "SCORED_CHUNK", "chunk_scores", "keep", "send"]

SCORED_CHUNK = 64  # most positions scored at once: [64, V] float32 scores and their temporaries


def chunk_scores(logits: mx.array, seq: SequenceState, start: int, end: int) -> LogprobArrays:
    """Lazy: ``logits`` [1, end - start, V] of positions ``start .. end-1`` against prompt tokens
    ``start+1 .. end``."""
    targets = mx.array(seq.tokens[start + 1 : end + 1], dtype=mx.int32)
    assert seq.prompt_logprobs is not None  # only sequences that asked are scored
    return logprobs(logits[0], targets, seq.prompt_logprobs)


def keep(seq: SequenceState, arrays: LogprobArrays, start: int, end: int, token_text: Callable[[int], str]) -> None:
    """Appends the chunk's records (``arrays`` evaluated) to the sequence's."""
    k = seq.prompt_logprobs
    assert k is not None  # only sequences that asked are scored
    seq.prompt_records += to_events(arrays, seq.tokens[start + 1 : end + 1], [k] * (end - start), token_text)


def send(seq: SequenceState) -> None:
    """Its records in one event (once its prefill ended); nothing for a request that did not ask."""
    if seq.prompt_logprobs is None:
        return
    records, seq.prompt_records = seq.prompt_records, []
    seq.delivery.prompt_logprobs(records, seq.tokens[0])
