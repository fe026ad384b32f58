"""Admission by memory: the ``plan`` accounting applied to the requests that run.

``MemoryBudget`` lives on the engine thread. The scheduler asks it whether the head
of the waiting queue fits beside the running requests (``try_reserve``) and gives
the memory back when that request ends (``release``). Its facts
(``would_ever_fit``, ``max_context``, ``budget_bytes``) change only when adapters
load or unload (``set_resident``, engine thread, each one attribute swap), so the
event loop may read them to refuse at once a request that could never run.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..hardware.machine import usable_memory
from .facts import ModelMemoryFacts
from .plan import _kv_chunk, _max_context, default_reserve, kv_bytes, transient_bytes

__all__ = ["MemoryBudget"]


class MemoryBudget:
    """What running requests have committed, against ``usable - weights - resident -
    reserve`` (resident: loaded adapters, ``set_resident``).

    A set of running requests costs its KV cache plus one transient workspace (one
    prefill step runs at a time) sized for the longest of them. With
    ``padded_batch`` (the default) the KV is charged as the decode batch stores it:
    mlx-lm's ``BatchKVCache`` left-pads every row to the longest, so ``n`` rows
    cost ``n x`` the longest row's cache; without it each row is charged its own.

    Invariants: ``committed_bytes <= budget_bytes`` whenever anything is reserved;
    a key is reserved at most once; ``release`` of an unknown key does nothing.
    Not thread-safe: ``try_reserve``/``release`` belong to one thread.
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
        """Bytes resident beside the weights (loaded adapters): the budget shrinks by
        them. Engine thread; callers check ``resident_room`` first."""
        self.resident_bytes = int(nbytes)
        self.budget_bytes = self.usable_bytes - self.facts.weights_bytes - self.resident_bytes - self.reserve_bytes
        self.max_context = (0 if self.budget_bytes < 0
                            else _max_context(self.facts, self.budget_bytes, self.prefill_chunk, 1))

    @property
    def fixed_room(self) -> int:
        """Bytes beside the weights and the reserve: fixed once built, so any thread may read it."""
        return self.usable_bytes - self.facts.weights_bytes - self.reserve_bytes

    def resident_room(self) -> tuple[int, int]:
        """(bytes that may be resident beside what running requests hold now, bytes
        with nothing running): the most ``set_resident`` may take."""
        idle = self.fixed_room
        return idle - self.committed_bytes, idle

    def cost(self, tokens: Sequence[int]) -> int:
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

    def would_ever_fit(self, tokens: int) -> bool:
        """Whether a request of ``tokens`` context fits with nothing else running."""
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        return self.budget_bytes >= 0 and self.cost([tokens]) <= self.budget_bytes

    def try_reserve(self, key: str, tokens: int) -> bool:
        """Commits memory for ``key``'s context of ``tokens`` if it fits beside what is
        committed now; False (nothing committed) otherwise."""
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        if key in self._held:
            raise ValueError(f"{key!r} already holds a reservation")
        if self.budget_bytes < 0 or self.cost([*self._held.values(), tokens]) > self.budget_bytes:
            return False
        self._held[key] = tokens
        return True

    def release(self, key: str) -> None:
        """Gives ``key``'s memory back; releasing twice (or an unknown key) does nothing."""
        self._held.pop(key, None)

    @property
    def reserved(self) -> int:
        """Requests holding memory."""
        return len(self._held)

    @property
    def committed_bytes(self) -> int:
        return self.cost(self._held.values())

    @property
    def available_bytes(self) -> int:
        """Budget not committed to running requests (negative if the budget is)."""
        return self.budget_bytes - self.committed_bytes
