"""Admission by memory: the ``plan`` accounting applied to the requests that run.

Invariant: reservations belong to the engine thread; ``budget_bytes``/``max_context``
change only by attribute swap in ``set_resident``, so the event loop may read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..hardware.machine import usable_memory
from .facts import ModelMemoryFacts
from .plan import _kv_chunk, _max_context, default_reserve, kv_bytes, transient_bytes

__all__ = ["MemoryBudget"]


class MemoryBudget:
    """What running requests have committed, against ``usable - weights - resident - reserve``.

    Invariants: ``committed_bytes <= budget_bytes`` whenever anything is reserved; a key
    is reserved at most once. ``padded_batch``: n rows cost n x the longest row's KV.
    """

    def __init__(self, facts: ModelMemoryFacts, *, usable: int | None = None,
                 reserve_bytes: int | None = None, prefill_chunk: int = 256,
                 padded_batch: bool = True):
        if prefill_chunk < 1:
            raise ValueError("prefill_chunk must be positive")
        if usable is None:
            usable, _ = usable_memory()
        self.facts = facts
        self.usable_bytes = int(usable)
        self.reserve_bytes = default_reserve(self.usable_bytes) if reserve_bytes is None else int(reserve_bytes)
        self.prefill_chunk = prefill_chunk
        self.padded_batch = padded_batch
        self._held: dict[str, int] = {}  # key -> context tokens
        self.set_resident(0)

    def set_resident(self, nbytes: int) -> None:
        """Bytes resident beside the weights (adapters); engine thread, after ``resident_room``."""
        self.resident_bytes = int(nbytes)
        self.budget_bytes = self.usable_bytes - self.facts.weights_bytes - self.resident_bytes - self.reserve_bytes
        self.max_context = (0 if self.budget_bytes < 0
                            else _max_context(self.facts, self.budget_bytes, self.prefill_chunk, 1))

    @property
    def fixed_room(self) -> int:
        """Bytes beside the weights and reserve; fixed, so any thread may read it."""
        return self.usable_bytes - self.facts.weights_bytes - self.reserve_bytes

    def resident_room(self) -> tuple[int, int]:
        """(most ``set_resident`` may take now, most with nothing running)."""
        idle = self.fixed_room
        return idle - self.committed_bytes, idle

    def cost(self, tokens: Iterable[int]) -> int:
        """Bytes beyond weights and reserve that requests of these contexts need together."""
        tokens = list(tokens)
        if not tokens:
            return 0
        longest = max(tokens)
        chunk = _kv_chunk(self.facts, self.prefill_chunk)
        if self.padded_batch:
            kv = kv_bytes(self.facts, longest, len(tokens), chunk=chunk)
        else:
            kv = sum(kv_bytes(self.facts, t, chunk=chunk) for t in tokens)
        return kv + transient_bytes(self.facts, self.prefill_chunk, longest, rows=len(tokens))

    def would_ever_fit(self, tokens: int, rows: int = 1) -> bool:
        """Whether a request of ``rows`` sequences of ``tokens`` context fits with nothing else running."""
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        return self.budget_bytes >= 0 and self.cost([tokens] * rows) <= self.budget_bytes

    def try_reserve(self, key: str, tokens: int) -> bool:
        """Commits memory for ``key``'s ``tokens`` if it fits now; False (nothing committed) otherwise."""
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        if key in self._held:
            raise ValueError(f"{key!r} already holds a reservation")
        if self.budget_bytes < 0 or self.cost([*self._held.values(), tokens]) > self.budget_bytes:
            return False
        self._held[key] = tokens
        return True

    def try_reserve_all(self, keys: Sequence[str], tokens: int) -> bool:
        """``try_reserve`` of ``tokens`` for every key at once (a request's choices): all or none."""
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        if taken := [k for k in keys if k in self._held]:
            raise ValueError(f"{taken[0]!r} already holds a reservation")
        if self.budget_bytes < 0 or self.cost([*self._held.values(), *[tokens] * len(keys)]) > self.budget_bytes:
            return False
        self._held.update((key, tokens) for key in keys)
        return True

    def release(self, key: str) -> None:
        """Gives ``key``'s memory back; idempotent."""
        self._held.pop(key, None)

    @property
    def reserved(self) -> int:
        return len(self._held)

    @property
    def committed_bytes(self) -> int:
        return self.cost(self._held.values())

    @property
    def available_bytes(self) -> int:
        """Budget not committed (negative if the budget is)."""

        return self.budget_bytes - self.committed_bytes
