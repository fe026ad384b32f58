"""Drafts from a small model that shares the target's tokenizer, in a ``Batch`` of its
own; after each step it rolls back to what each sequence took."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

from ....mlx_typed import int_list
from ....requests import SpeculationMode
from ..decode.batch import Batch
from ..sequence.state import SequenceState


class DraftMismatch(ValueError):
    """The draft model cannot serve this target."""


def check_draft(target_tokenizer, draft_tokenizer, draft_rolls_back: bool, names: tuple[str, str]) -> None:
    """DraftMismatch for another vocabulary or caches that cannot roll back."""
    target, draft = dict(target_tokenizer.get_vocab()), dict(draft_tokenizer.get_vocab())
    if target != draft:
        differing = sum(1 for t, i in target.items() if draft.get(t) != i) + len(draft.keys() - target.keys())
        raise DraftMismatch(f"draft model {names[1]!r} does not share the tokenizer of {names[0]!r}: "
                            f"{len(target)} vs {len(draft)} tokens, {differing} differ")
    if not draft_rolls_back:
        raise DraftMismatch(f"draft model {names[1]!r} keeps caches that cannot roll back "
                            "(sliding windows or recurrent state)")


PLACEHOLDER = -1  # a fed position whose token is not the sequence's


class DraftModel:
    def __init__(self, model: nn.Module, prefill_chunk: int = 256):
        self._model = model
        self._chunk = prefill_chunk
        self._batch = Batch(model)
        self._rows: list[SequenceState] = []
        self._seen: list[int] = []
        self._fed: list[list[int]] = []  # drafts fed in the current step, per row
        self._base: list[int] = []  # seen before those drafts

    @staticmethod
    def serves(seq: SequenceState) -> bool:
        return seq.speculation is not None and seq.speculation.mode is SpeculationMode.DRAFT

    @property
    def nbytes(self) -> int:
        return self._batch.nbytes

    def prefilling(self, seqs: list[SequenceState], starts: list[int], pads: list[int]
                   ) -> AbstractContextManager[None]:
        return nullcontext()  # the draft reads a prompt when its row joins

    def capturing(self, rows: Sequence[SequenceState]) -> AbstractContextManager[None]:
        return nullcontext()  # the draft runs its own forwards

    def join(self, seq: SequenceState) -> None:
        """Prefills the draft's caches with what the target has computed."""
        if not self.serves(seq):
            return
        caches = make_prompt_cache(self._model)
        for start in range(0, seq.computed, self._chunk):
            self._model(mx.array(seq.tokens[start : min(start + self._chunk, seq.computed)])[None], cache=caches)
            mx.eval([c.state for c in caches])
        self._batch.join(caches)
        self._rows.append(seq)
        self._seen.append(seq.computed)

    def retain(self, live: Sequence[SequenceState]) -> None:
        alive = {id(s) for s in live}
        keep = [i for i, seq in enumerate(self._rows) if id(seq) in alive]
        if len(keep) != len(self._rows):
            self._batch.keep(keep)
            self._rows = [self._rows[i] for i in keep]
            self._seen = [self._seen[i] for i in keep]

    def propose(self, rows: Sequence[SequenceState], wanted: Sequence[int], drafts: list[list[int]]) -> list[list[int]]:
        """``drafts`` with DRAFT-mode rows' filled in (``wanted[i]`` for row ``i``; 0: its own)."""
        index = {id(seq): i for i, seq in enumerate(self._rows)}
        ks = [0] * len(self._rows)
        for seq, k in zip(rows, wanted):
            if id(seq) in index:
                ks[index[id(seq)]] = k
        self._fed, self._base = [[] for _ in self._rows], list(self._seen)
        if not any(ks):
            return drafts
        out = self._draft(max(ks))
        return [out[index[id(seq)]][: wanted[j]] if id(seq) in index and wanted[j] else drafts[j]
                for j, seq in enumerate(rows)]

    def _draft(self, k: int) -> list[list[int]]:
        feeds = [seq.tokens[seen:] for seq, seen in zip(self._rows, self._seen)]
        self._base = [seen + len(f) for seen, f in zip(self._seen, feeds)]
        # A row with nothing new steps on a PLACEHOLDER, which settle() always rolls back.
        idle = [not f for f in feeds]
        feeds = [f or [seq.tokens[-1]] for seq, f in zip(self._rows, feeds)]
        for i in (i for i, flag in enumerate(idle) if flag):
            self._fed[i].append(PLACEHOLDER)
        out: list[list[int]] = [[] for _ in self._rows]
        for j in range(k):
            scores = self._batch.forward(feeds)
            last = mx.array([len(f) - 1 for f in feeds], dtype=mx.int32)
            chosen = int_list(mx.argmax(scores[mx.arange(len(feeds)), last], axis=-1))
            for i, token in enumerate(chosen):
                if not idle[i]:
                    out[i].append(token)
            if j + 1 < k:
                feeds = [[t] for t in chosen]
                for i, token in enumerate(chosen):
                    self._fed[i].append(token)
        self._seen = list(self._base)
        return out

    def settle(self, rows: Sequence[SequenceState]) -> None:
        """After the target took its tokens: keeps the fed drafts each sequence took."""
        drops = []
        for i, seq in enumerate(self._rows):
            fed, base = self._fed[i], self._base[i]
            taken = seq.tokens[base : base + len(fed)]
            valid = 0
            while valid < len(fed) and valid < len(taken) and fed[valid] == taken[valid]:
                valid += 1
            drops.append(len(fed) - valid)
            self._seen[i] = base + valid
        if any(self._fed):
            self._batch.rollback(drops)
        self._fed = [[] for _ in self._rows]
