"""One step of the running batch: feed every row its pending tokens, choose, deliver.

Each row is fed ``tokens[computed:]`` (one token in steady decoding); the scores at
its last fed position choose its next token. Choice is batched (``sampling.choose``,
with the token masks of every constrained row filled together), logprobs too, and
the host reads the results once per step.
"""

from __future__ import annotations

from typing import Callable, Sequence as Seq

import mlx.core as mx

from .batch import Batch
from .grammar.masks import site_masks
from .logprobs import logprobs, to_events
from .sampling import choose
from .sequence import Sequence


class Decoder:
    def __init__(self, token_text: Callable[[int], str]):
        self._token_text = token_text

    def step(self, batch: Batch, rows: Seq[Sequence]) -> int:
        """Runs one step over ``rows`` (the batch's rows, in order); returns the number
        of tokens appended to them."""
        feeds = [seq.pending for seq in rows]
        scores = batch.step(feeds)
        sites = _last_positions(scores, [len(f) for f in feeds])
        masks = site_masks([seq.constraint for seq in rows], sites.shape[-1])
        chosen = choose(sites, [seq.sampling for seq in rows], [seq.step for seq in rows], masks)
        wanted = [i for i, seq in enumerate(rows) if seq.top_logprobs is not None]
        arrays = None
        if wanted:
            index = mx.array(wanted, dtype=mx.int32)
            arrays = logprobs(sites[index], chosen[index], max(rows[i].top_logprobs for i in wanted))
            mx.eval(chosen, arrays.chosen, *(a for a in (arrays.top_ids, arrays.top_values) if a is not None))
        else:
            mx.eval(chosen)
        tokens = chosen.tolist()
        records = {}
        if arrays is not None:
            events = to_events(arrays, [tokens[i] for i in wanted], [rows[i].top_logprobs for i in wanted],
                               self._token_text)
            records = dict(zip(wanted, events))
        appended = 0
        for i, (seq, feed) in enumerate(zip(rows, feeds)):
            seq.computed += len(feed)
            appended += seq.accept([tokens[i]], [records[i]] if i in records else ())
        return appended


def _last_positions(scores: mx.array, widths: Seq[int]) -> mx.array:
    """Scores [B, V] at each row's last fed position out of [B, K, V]."""
    if all(w == scores.shape[1] for w in widths):
        return scores[:, -1, :]
    return scores[mx.arange(len(widths)), mx.array([w - 1 for w in widths], dtype=mx.int32)]
