"""One step of the running batch: pending tokens and drafts fed, every site chosen
exactly as without speculation, one host read. A row's own host work that raises
ends that row alone; a failure of the batched work fails every row. A fork (a choice
forking from a row's first step) draws its first token from that row's scores at its
last prompt token, with its own sampling state; that row feeds no drafts in that step."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import AbstractSet, Callable, Sequence

import mlx.core as mx

from ....events import TokenLogprob
from ....mlx_typed import int_list
from ...grammar.masks import site_masks
from ..sampling.logprobs import LogprobArrays, logprobs, to_events
from ..sampling.sampler import choose
from ..sequence.state import SequenceState, end_row
from ..speculation.drafter import Drafter, NoDrafter
from ..speculation.policy import step_allowance
from .batch import Batch


@dataclass(frozen=True)
class _Sites:
    """One sample site per (row, position from its last pending token on)."""

    rows: list[int]
    positions: list[int]
    firsts: list[int]  # index of each row's first site

    @classmethod
    def of(cls, feeds: Sequence[Sequence[int]], drafts: Sequence[Sequence[int]]) -> "_Sites":
        rows: list[int] = []
        positions: list[int] = []
        firsts: list[int] = []
        for i, (feed, d) in enumerate(zip(feeds, drafts)):
            firsts.append(len(rows))
            start = len(feed) - len(d) - 1
            rows += [i] * (len(d) + 1)
            positions += list(range(start, len(feed)))
        return cls(rows, positions, firsts)


class Decoder:
    def __init__(self, token_text: Callable[[int], str], *, can_roll_back: bool = False, step_tokens: int = 16,
                 speculation_rows: int | None = None, drafter: Drafter = NoDrafter(),
                 route: Callable[[Sequence[SequenceState]], AbstractContextManager] | None = None):
        self._token_text = token_text
        self._route = route or (lambda _rows: nullcontext())
        self._can_roll_back = can_roll_back
        self._step_tokens = step_tokens
        self._speculation_rows = speculation_rows
        self._drafter = drafter

    def step(self, batch: Batch, rows: Sequence[SequenceState],
             forks: Sequence[tuple[int, SequenceState]] = ()) -> int:
        """``rows``: the batch's, in order; ``forks``: (row, sequence) drawing from that row's
        first site. Returns the number of tokens appended."""
        drafts = self._drafts(rows, {r for r, _ in forks})
        feeds = [seq.pending + d for seq, d in zip(rows, drafts)]
        with self._route(rows), self._drafter.capturing(rows):
            scores = batch.forward(feeds)  # drafts are verified by the adapted model
        sites = _Sites.of(feeds, drafts)
        fork_sites = len(sites.rows)  # the forks' sites follow the rows'
        sites.rows.extend(r for r, _ in forks)
        sites.positions.extend(sites.positions[sites.firsts[r]] for r, _ in forks)
        site_scores = scores[mx.array(sites.rows, dtype=mx.int32), mx.array(sites.positions, dtype=mx.int32)]
        owners = [*(rows[r] for r in sites.rows[:fork_sites]), *(seq for _, seq in forks)]
        states = [seq.sampling for seq in owners]
        steps = [rows[r].step + (i - sites.firsts[r]) for i, r in enumerate(sites.rows[:fork_sites])]
        steps += [seq.step for _, seq in forks]
        extras = [drafts[r][: i - sites.firsts[r]] for i, r in enumerate(sites.rows[:fork_sites])]
        extras += [[] for _ in forks]
        masks = site_masks([None if seq.finished else seq.constraint for seq in (*rows, *(s for _, s in forks))],
                           site_scores.shape[-1], [*drafts, *([] for _ in forks)])
        chosen = choose(site_scores, states, steps, extras, masks)
        records = self._logprobs(rows, sites, site_scores, chosen)
        tokens = int_list(chosen)
        runs, drops = [], []
        for i, (seq, d) in enumerate(zip(rows, drafts)):
            mine = tokens[sites.firsts[i] : sites.firsts[i] + len(d) + 1]
            accepted = _agreeing(d, mine)
            runs.append((d[:accepted] + [mine[accepted]], sites.firsts[i]))
            drops.append(len(d) - accepted)
            seq.computed += len(feeds[i]) - len(d) + accepted
            if d and seq.speculation is not None:
                seq.speculation.record(len(d), accepted)
        batch.rollback(drops)
        appended = 0
        for seq, (run, first) in zip(rows, runs):
            if seq.finished:  # failed earlier in this step
                continue
            lps = [records[first + j] for j in range(len(run))] if first in records else ()
            try:
                appended += seq.accept(run, lps)
            except Exception as exc:  # noqa: BLE001 - this row's delivery, stop rule or grammar
                end_row(seq, exc, "delivery")
        for j, (r, seq) in enumerate(forks, start=fork_sites):
            seq.computed = rows[r].computed  # the prompt, all of it: the row fed its last token, no drafts
            try:
                appended += seq.accept([tokens[j]], [records[j]] if j in records else ())
            except Exception as exc:  # noqa: BLE001
                end_row(seq, exc, "delivery")
        self._drafter.settle(rows)
        return appended

    def _drafts(self, rows: Sequence[SequenceState], plain: AbstractSet[int] = frozenset()) -> list[list[int]]:
        """Each row's drafts (none for the rows in ``plain``)."""
        allowance = (step_allowance(len(rows), self._step_tokens, self._speculation_rows)
                     if self._can_roll_back else 0)
        drafts, wanted = [], []  # wanted: drafts a draft model proposes instead
        for i, seq in enumerate(rows):
            spec = seq.speculation
            room = seq.rule.max_tokens - seq.num_output - 1  # drafts past the length cap are wasted
            cap = min(allowance, room) if spec is not None and i not in plain else 0
            if spec is not None and cap > 0:
                propose = spec.propose
                d, k = _row(seq, lambda: propose(seq.tokens, seq.prompt_len, cap, seq.constraint), ([], 0),
                            "drafting")
            else:
                d, k = [], 0
            drafts.append(d)
            wanted.append(k)
        drafts = self._drafter.propose(rows, [0 if s.finished else k for s, k in zip(rows, wanted)], drafts)
        return [_valid_prefix(seq, d) for seq, d in zip(rows, drafts)]

    def _logprobs(self, rows, sites: _Sites, site_scores: mx.array, chosen: mx.array) -> dict[int, TokenLogprob]:
        """Records by site for the rows that asked, read with ``chosen`` in one eval."""
        wanted = [i for i, r in enumerate(sites.rows) if rows[r].top_logprobs is not None]
        if not wanted:
            mx.eval(chosen)
            return {}
        tops = [rows[sites.rows[i]].top_logprobs for i in wanted]
        index = mx.array(wanted, dtype=mx.int32)
        arrays = logprobs(site_scores[index], chosen[index], max(tops))
        mx.eval(chosen, arrays.chosen, *(a for a in (arrays.top_ids, arrays.top_values) if a is not None))
        values = int_list(chosen)
        try:
            return dict(zip(wanted, to_events(arrays, [values[i] for i in wanted], tops, self._token_text)))
        except Exception:  # noqa: BLE001 - find the rows whose records fail, one row at a time
            records: dict[int, TokenLogprob] = {}
            for r in dict.fromkeys(sites.rows[i] for i in wanted):
                mine = [j for j, i in enumerate(wanted) if sites.rows[i] == r]
                index = mx.array(mine, dtype=mx.int32)
                part = LogprobArrays(arrays.chosen[index], *(a[index] if a is not None else None
                                                             for a in (arrays.top_ids, arrays.top_values)))
                events = _row(rows[r], lambda: to_events(part, [values[wanted[j]] for j in mine],
                                                         [tops[j] for j in mine], self._token_text), (), "logprobs")
                records.update(zip((wanted[j] for j in mine), events))
            return records


def _valid_prefix(seq: SequenceState, drafts: list[int]) -> list[int]:
    """The drafts the row's grammar accepts, all of them without one."""
    constraint = seq.constraint
    if not drafts or constraint is None:
        return drafts
    return _row(seq, lambda: drafts[: constraint.valid_prefix(drafts)], [], "drafting")


def _row(seq: SequenceState, work: Callable[[], object], failed: object, during: str):
    """``work()`` for one row; on an exception the row ends alone and ``failed`` stands in."""
    if seq.finished:
        return failed
    try:
        return work()
    except Exception as exc:  # noqa: BLE001
        end_row(seq, exc, during)
        return failed


def _agreeing(drafts: Sequence[int], chosen: Sequence[int]) -> int:
    accepted = 0
    for draft, target in zip(drafts, chosen):
        if draft != target:
            break
        accepted += 1
    return accepted
