"""Prompts into their sequences' own caches, chunk by chunk, within a token budget; the
last prompt token is left pending for the batch. A failed shared forward is retried
one prompt at a time. A request asking for prompt logprobs prefills alone, each chunk
scored as it runs (``prompt_logprobs``)."""

from __future__ import annotations

import copy
import logging
import weakref
from collections import deque
from contextlib import AbstractContextManager, nullcontext
from typing import Callable, Sequence

import mlx.core as mx
import mlx.nn as nn

from ....caches.quantized_kv import batch_cache
from ....vision.encoded import EncodedImages
from ....vision.model import VisionTower
from ...config import SchedulerConfig
from ..scheduling.reuse import PrefixReuse
from ..sequence.state import SequenceState
from . import prompt_logprobs
from .interrupt import Interrupted, LayerCheckpoints
from .steps import StepKind, next_prefill_step

Route = Callable[[Sequence[SequenceState]], AbstractContextManager]
# Around a prompt forward: (its sequences, where each one's tokens start, each one's left padding).
Observe = Callable[[list[SequenceState], list[int], list[int]], AbstractContextManager]
log = logging.getLogger("engine.generation.core.prefill.prefiller")


def unrouted(_seqs: Sequence[SequenceState]) -> AbstractContextManager:
    return nullcontext()


def _own_caches(seq: SequenceState) -> list:
    """A prefilling sequence's own caches (the scheduler gives it them when it starts)."""
    assert seq.caches is not None
    return seq.caches


class Prefiller:
    def __init__(self, model: nn.Module, config: SchedulerConfig, reuse: PrefixReuse, plain_kv: bool,
                 interrupt: Callable[[str], bool] | None = None, route: Route = unrouted,
                 vision: VisionTower | None = None, *, token_text: Callable[[int], str],
                 observe: Observe | None = None):
        self._model = model
        self._observe = observe or (lambda _seqs, _starts, _pads: nullcontext())
        self._token_text = token_text  # an alternative's text, for prompt logprobs
        self.images = EncodedImages(vision, config.image_cache_bytes) if vision is not None else None
        self._route = route
        self._config = config
        self._reuse = reuse
        self._plain_kv = plain_kv  # only then may short prompts share a forward
        self._interrupt = interrupt
        self.checkpoints = LayerCheckpoints(model) if interrupt is not None else None
        self._failed_in_a_group: weakref.WeakSet[SequenceState] = weakref.WeakSet()  # after a shared forward failed
        self.computed_tokens = 0  # prompt tokens run through the model, over all requests

    def run(self, queue: deque[SequenceState], budget: int
            ) -> tuple[list[SequenceState], list[SequenceState], list[tuple[SequenceState, Exception]]]:
        """Spends up to ``budget`` prompt tokens, head first. Returns (done, interrupted,
        failed with their error), each taken out of the queue in order."""
        done: list[SequenceState] = []
        interrupted: list[SequenceState] = []
        failed: list[tuple[SequenceState, Exception]] = []
        while queue and budget > 0:
            group = self._fresh_short_group(queue, budget)
            if len(group) >= 2:
                try:
                    budget -= self._prefill_group(group)
                except Interrupted:
                    interrupted += self._take_cancelled(queue, group)
                except Exception:  # each of them again, alone
                    log.exception("a shared prefill of %d prompts failed; prefilling them one by one", len(group))
                    self._failed_in_a_group.update(group)
                continue
            seq = queue[0]
            snapshot_at = seq.prefix.snapshot_at if self._reuse.applies(seq) else None
            chunk = min(self._config.prefill_chunk, budget)
            if seq.prompt_logprobs is not None:  # its scores [chunk, V] are built whole: keep them small
                chunk = min(chunk, prompt_logprobs.SCORED_CHUNK)
            step = next_prefill_step(seq.prompt_len, seq.computed, chunk, True, snapshot_at)
            if step.kind is StepKind.FINAL:
                if seq.images is not None:
                    seq.images.release()
                try:
                    prompt_logprobs.send(seq)
                except Exception as exc:  # noqa: BLE001 - its delivery: it fails alone
                    failed.append((queue.popleft(), exc))
                    continue
                done.append(queue.popleft())
                continue
            try:
                tokens = mx.array(seq.tokens[step.start : step.end], dtype=mx.int32)[None]
                embeddings = (seq.images.embeddings(self._model, self.images, tokens, step.start)
                              if seq.images is not None and seq.images.covers(step.start, step.end) else None)
                with self._observe([seq], [step.start], [0]):
                    scored = self._forward(tokens, _own_caches(seq), [seq], embeddings, scored=(
                        (step.start, step.end) if seq.prompt_logprobs is not None else None))
                if scored is not None:
                    prompt_logprobs.keep(seq, scored, step.start, step.end, self._token_text)
            except Interrupted:
                interrupted += self._take_cancelled(queue, [seq])
                continue
            except Exception as exc:  # noqa: BLE001 - this sequence's chunk: it fails alone
                failed.append((queue.popleft(), exc))
                continue
            seq.computed = step.end
            self.computed_tokens += step.size
            budget -= step.size
            if step.snapshot:
                self._reuse.store(seq, seq.tokens[: step.end], copy.deepcopy(_own_caches(seq)))
        return done, interrupted, failed

    def _forward(self, tokens: mx.array, caches: list, seqs: list[SequenceState],
                 embeddings: mx.array | None = None, scored: tuple[int, int] | None = None
                 ) -> prompt_logprobs.LogprobArrays | None:
        """Checkpointed between layers for ``seqs``' cancels; ``embeddings`` (an image
        chunk's) replace the tokens' own. ``scored`` (one sequence's chunk ``[start, end)``):
        its positions' prompt logprobs too, evaluated with the KV (else the scores stay unbuilt)."""
        extra = {"input_embeddings": embeddings} if embeddings is not None else {}
        interrupt = self._interrupt
        with self._route(seqs):
            if self.checkpoints is None or interrupt is None:  # both or neither (__init__)
                logits = self._model(tokens, cache=caches, **extra)
            else:
                with self.checkpoints.armed(lambda: any(interrupt(s.key) for s in seqs)):
                    logits = self._model(tokens, cache=caches, **extra)
            arrays = prompt_logprobs.chunk_scores(logits, seqs[0], *scored) if scored is not None else None
            mx.eval([c.state for c in caches], *(arrays.arrays if arrays is not None else ()))
        return arrays

    def _take_cancelled(self, queue: deque[SequenceState], seqs: list[SequenceState]) -> list[SequenceState]:
        """Removes those of ``seqs`` whose Cancel is waiting; the others redo their step."""
        interrupt = self._interrupt
        assert interrupt is not None  # Interrupted is raised by the checkpoints, made with it
        cancelled = [s for s in seqs if interrupt(s.key)]
        for seq in cancelled:
            queue.remove(seq)
        return cancelled

    def min_prefix(self, seq: SequenceState) -> int:
        """The shortest cached prefix worth taking: half of a prompt that could share a
        batched forward (a hit makes it prefill alone)."""
        n = seq.prompt_len - 1
        if self._plain_kv and self._config.prefill_batch > 1 and n <= self._config.prefill_chunk:
            return (n + 1) // 2
        return 1

    def _fresh_short_group(self, queue: deque[SequenceState], budget: int) -> list[SequenceState]:
        """Leading sequences: fresh, fitting one chunk, no snapshot boundary inside."""
        if not self._plain_kv:
            return []
        group: list[SequenceState] = []
        used = 0
        for seq in queue:
            n = seq.prompt_len - 1
            boundary = seq.prefix.snapshot_at
            if (len(group) >= self._config.prefill_batch or seq.computed != 0 or n < 1 or seq in self._failed_in_a_group
                    or seq.images is not None or seq.prompt_logprobs is not None
                    or n > self._config.prefill_chunk or used + n > budget
                    or (boundary is not None and 0 < boundary < n)):
                break
            group.append(seq)
            used += n
        return group

    def _prefill_group(self, group: list[SequenceState]) -> int:
        """One left-padded forward; each sequence gets its own caches back."""
        lengths = [seq.prompt_len - 1 for seq in group]
        width = max(lengths)
        pads = [width - n for n in lengths]
        ids = [[0] * p + seq.tokens[:n] for seq, p, n in zip(group, pads, lengths)]
        caches = [batch_cache(pads, like) for like in _own_caches(group[0])]
        with self._observe(group, [0] * len(group), pads):
            self._forward(mx.array(ids, dtype=mx.int32), caches, group)
        for i, (seq, n) in enumerate(zip(group, lengths)):
            seq.caches = [c.extract(i) for c in caches]
            seq.computed = n
        self.computed_tokens += sum(lengths)
        return sum(lengths)
