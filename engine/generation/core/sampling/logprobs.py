"""Log probabilities of chosen tokens and their top alternatives, batched; always of the
unmodified distribution (before temperature, penalties or masks). Each value is the raw
score minus its row's log-sum-exp, so no [n, V] array of log probabilities is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import mlx.core as mx

from ....events import TokenLogprob, TopLogprob
from ....mlx_typed import float_list, float_rows, int_rows


@dataclass(frozen=True)
class LogprobArrays:
    """Lazy: chosen [n]; top ids and values [n, top_n], most likely first."""

    chosen: mx.array
    top_ids: mx.array | None
    top_values: mx.array | None

    @property
    def arrays(self) -> list[mx.array]:
        """What one ``mx.eval`` needs."""
        return [a for a in (self.chosen, self.top_ids, self.top_values) if a is not None]


def logprobs(scores: mx.array, chosen: mx.array, top_n: int) -> LogprobArrays:
    """``scores`` [n, V] raw, ``chosen`` [n] ids (may be lazy)."""
    scores = scores.astype(mx.float32)
    norm = mx.logsumexp(scores, axis=-1, keepdims=True)
    picked = mx.take_along_axis(scores, chosen.reshape(-1, 1), axis=-1)[:, 0] - norm[:, 0]
    if top_n <= 0:
        return LogprobArrays(picked, None, None)
    ids = mx.argpartition(-scores, top_n - 1, axis=-1)[:, :top_n]
    values = mx.take_along_axis(scores, ids, axis=-1) - norm
    order = mx.argsort(-values, axis=-1)
    return LogprobArrays(picked, mx.take_along_axis(ids, order, axis=-1),
                         mx.take_along_axis(values, order, axis=-1))


def to_events(arrays: LogprobArrays, chosen: Sequence[int], tops: Sequence[int],
              token_text: Callable[[int], str]) -> list[TokenLogprob]:
    """Host-side records, keeping ``tops[i]`` alternatives for site ``i``."""
    values = float_list(arrays.chosen)
    ids = int_rows(arrays.top_ids) if arrays.top_ids is not None else None
    top_values = float_rows(arrays.top_values) if arrays.top_values is not None else None
    out = []
    for i, (token, value, n) in enumerate(zip(chosen, values, tops)):
        top: tuple[TopLogprob, ...] = ()
        if n and ids is not None and top_values is not None:  # both or neither (logprobs())
            top = tuple(TopLogprob(t, v, token_text(t)) for t, v in zip(ids[i][:n], top_values[i][:n]))
        out.append(TokenLogprob(token, value, top))
    return out
