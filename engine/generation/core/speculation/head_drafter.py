"""Drafts from a head that reads the target's hidden states (heads.py), in a ``Batch``
of its own. The target's prompt and verifying forwards are captured: each prompt chunk's
pairs (the hidden state at each position, the next token) go into the sequence's head
cache as it prefills, so a row joins with its prompt read; after each step it gains the
pairs of the positions the target verified; the chained drafts' own entries are rolled
back. Positions a cached prefix
restored have no hidden states: the head attends over the others."""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn

from ....mlx_typed import int_rows
from ..decode.batch import Batch
from ..sequence.state import SequenceState
from .draft import DraftModel
from .heads import DraftHead
from .taps import Taps

_MAX_PENDING = 64  # verified pairs a row holds before they are fed without drafting


class HeadDrafter:
    def __init__(self, target: nn.Module, head: DraftHead, prefill_chunk: int = 256):
        self._head = head
        self._chunk = prefill_chunk
        self._taps = Taps(target, head.tap_layers, head.tap_final)
        self._batch = Batch(head)
        self._rows: list[SequenceState] = []
        self._pairs: list[list[tuple[mx.array, int]]] = []  # verified (hidden, next token) not yet fed
        self._before: dict[int, int] = {}  # id(row) -> its computed tokens before this step
        self._index: dict[int, int] = {}  # id(row) -> its index in the step's target batch
        self._sink: dict[object, mx.array] | None = None
        # a prefilling sequence's head cache, until it joins
        self._prompts: weakref.WeakKeyDictionary[SequenceState, list] = weakref.WeakKeyDictionary()

    serves = staticmethod(DraftModel.serves)  # DRAFT-mode rows, as for a draft model

    @property
    def nbytes(self) -> int:
        return self._batch.nbytes

    @contextmanager
    def prefilling(self, seqs: list[SequenceState], starts: list[int], pads: list[int]) -> Iterator[None]:
        """Around a prompt forward (left-padded by ``pads``): the served sequences' pairs go
        into their own head caches at once (held until they join; only the KV is kept)."""
        if not any(self.serves(s) for s in seqs):
            yield
            return
        with self._taps.capture() as sink:
            yield
        features = self._head.features(sink)
        width = features.shape[1]
        for i, (seq, start, pad) in enumerate(zip(seqs, starts, pads)):
            if not self.serves(seq):
                continue
            caches = self._prompts.setdefault(seq, self._head.make_cache())
            tokens = seq.tokens[start + 1 : start + width - pad + 1]
            for at in range(0, len(tokens), self._chunk):
                ids = mx.array(tokens[at : at + self._chunk], dtype=mx.int32)[None]
                self._head(ids, cache=caches, hidden=features[i : i + 1, pad + at : pad + at + self._chunk])
                mx.eval([c.state for c in caches])

    def join(self, seq: SequenceState) -> None:
        """Adds the row with its head cache (its prompt's pairs, where it prefilled here)."""
        if not self.serves(seq):
            return
        self._batch.join(self._prompts.pop(seq, []) or self._head.make_cache())
        self._rows.append(seq)
        self._pairs.append([])

    def retain(self, live: Sequence[SequenceState]) -> None:
        alive = {id(s) for s in live}
        keep = [i for i, seq in enumerate(self._rows) if id(seq) in alive]
        if len(keep) != len(self._rows):
            self._batch.keep(keep)
            self._rows = [self._rows[i] for i in keep]
            self._pairs = [self._pairs[i] for i in keep]

    @contextmanager
    def capturing(self, rows: Sequence[SequenceState]) -> Iterator[None]:
        """Around the target's verifying forward over ``rows`` (the step's batch, in order)."""
        self._before = {id(seq): seq.computed for seq in rows}
        self._index = {id(seq): i for i, seq in enumerate(rows)}
        with self._taps.capture() as sink:
            yield
        self._sink = sink

    def propose(self, rows: Sequence[SequenceState], wanted: Sequence[int], drafts: list[list[int]]) -> list[list[int]]:
        """``drafts`` with DRAFT-mode rows' filled in (``wanted[i]`` for row ``i``; 0: its own)."""
        index = {id(seq): i for i, seq in enumerate(self._rows)}
        ks = [0] * len(self._rows)
        for seq, k in zip(rows, wanted):
            if id(seq) in index and self._pairs[index[id(seq)]]:
                ks[index[id(seq)]] = k
        if not any(ks):
            if max(map(len, self._pairs), default=0) >= _MAX_PENDING:
                self._draft(0)
            return drafts
        out = self._draft(max(ks))
        return [out[index[id(seq)]][: wanted[j]] if id(seq) in index and wanted[j] else drafts[j]
                for j, seq in enumerate(rows)]

    def _draft(self, k: int) -> list[list[int]]:
        """Feeds every row's verified pairs (a row with none: one placeholder, rolled
        back), then chains ``k`` drafts; keeps only the verified pairs' entries."""
        width = max(len(p) for p in self._pairs)
        placeholders = [0 if p else 1 for p in self._pairs]
        zero = mx.zeros_like(next(p for p in self._pairs if p)[0][0])
        feeds, hidden = [], []
        for pairs in self._pairs:
            vectors = [v for v, _ in pairs] or [zero]
            feeds.append([t for _, t in pairs] or [0])
            hidden.append(mx.stack(vectors + [vectors[-1]] * (width - len(vectors))))
        self._pairs = [[] for _ in self._rows]
        scores = self._batch.forward(feeds, hidden=mx.stack(hidden))
        if k == 0:
            mx.eval([c.state for c in self._batch.caches or ()])
            self._batch.rollback(placeholders)
            return [[] for _ in self._rows]
        rows = mx.arange(len(feeds))
        last = mx.array([len(f) - 1 for f in feeds], dtype=mx.int32)
        chosen = [self._head.to_target(mx.argmax(scores[rows, last], axis=-1))]
        for _ in range(k - 1):  # chained on the device: one host read for all k
            state = self._head.out[rows, last if len(chosen) == 1 else 0][:, None]
            scores = self._batch.forward_one(chosen[-1], hidden=state)
            chosen.append(self._head.to_target(mx.argmax(scores[:, 0], axis=-1)))
        drafted = mx.stack(chosen, axis=1)
        mx.eval(drafted)
        out = int_rows(drafted)
        self._batch.rollback([(k - 1) + p for p in placeholders])
        return out

    def settle(self, rows: Sequence[SequenceState]) -> None:
        """After the target took its tokens: each row's verified positions become pairs."""
        sink, self._sink = self._sink, None
        if sink is None or not self._rows:
            return
        features = self._head.features(sink)
        for r, seq in enumerate(self._rows):
            i, before = self._index.get(id(seq)), self._before.get(id(seq))
            if i is None or before is None or seq.finished:
                continue
            for j in range(seq.computed - before):
                self._pairs[r].append((features[i, j], seq.tokens[before + j + 1]))
