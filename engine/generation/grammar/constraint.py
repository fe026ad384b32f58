"""One row's structured output: an llguidance matcher fed the row's output tokens.

A ``Constraint`` is a part of its ``Sequence`` (engine thread only, no MLX work).
``Sequence.accept`` asks ``ends(token)`` before a chosen token is emitted (the
matcher's own stop token, allowed only when the output is complete, ends the row
without being emitted) and ``consume(token)`` after; ``done`` then says whether
the output is complete with nothing else allowed. ``masks`` fills the token masks
of every constrained row of a step together.

Speculative steps: ``valid_prefix(drafts)`` says how many drafts the grammar
allows (without changing the state); ``rollback(n)`` undoes the last ``n``
consumed tokens, for rows whose rejected drafts were consumed.

``GrammarStats`` counts one model's structured output for the metrics: each counter
has one writer (the event loop for requests and compiles, the engine thread for masks).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from llguidance import LLMatcher


@dataclass
class GrammarStats:
    requests: Counter[str] = field(default_factory=Counter)  # constrained requests accepted, by format
    rejected: int = 0  # formats refused (invalid, too large, too slow to compile)
    mask_seconds: float = 0.0  # engine thread: filling and expanding token masks
    masked_tokens: int = 0  # sample sites a mask was applied to

    def masked(self, seconds: float, sites: int) -> None:
        self.mask_seconds += seconds
        self.masked_tokens += sites


class Constraint:
    def __init__(self, matcher: LLMatcher, stop_tokens: frozenset[int], stats: GrammarStats):
        self.matcher = matcher
        self.stop_tokens = stop_tokens
        self.stats = stats
        self.consumed = 0  # output tokens the matcher has taken

    @property
    def accepting(self) -> bool:
        """The output so far is complete (it may also continue)."""
        return self.matcher.is_accepting()

    @property
    def done(self) -> bool:
        """The output is complete and nothing but the stop token is allowed."""
        return self.matcher.is_stopped() and not self.matcher.is_error()

    @property
    def error(self) -> str:
        """Why the matcher failed (e.g. a grammar over its limits); empty if it did not."""
        return matcher_error(self.matcher)

    def ends(self, token: int) -> bool:
        """Whether ``token`` is the matcher's stop token, chosen where the output is complete."""
        return token in self.stop_tokens and self.matcher.is_accepting()

    def consume(self, token: int) -> bool:
        """Advances past ``token``; False if the grammar does not allow it (the matcher
        is then in its error state for good)."""
        if not self.matcher.consume_token(token):
            return False
        self.consumed += 1
        return True

    def rollback(self, count: int) -> None:
        """Undoes the last ``count`` consumed tokens."""
        if not 0 <= count <= self.consumed:
            raise ValueError(f"cannot roll back {count} of {self.consumed} consumed tokens")
        if count and not self.matcher.rollback(count):
            raise RuntimeError(f"the matcher could not roll back: {self.error}")
        self.consumed -= count

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` the grammar allows in a row from here (state unchanged)."""
        return self.matcher.validate_tokens(list(tokens))


def matcher_error(matcher: LLMatcher, limit: int = 1000) -> str:
    """A matcher's error for a client: at most ``limit`` characters, without the
    marker llguidance puts where verbose details would be; empty if none."""
    return matcher.get_error().replace("<non-verbose/>", "").strip()[:limit]
