"""One row's structured output: a matcher fed its output tokens (engine thread, no MLX).
Each ``GrammarStats`` counter has one writer."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from llguidance import LLMatcher, LLTokenizer


@dataclass
class GrammarStats:
    requests: Counter[str] = field(default_factory=Counter)  # accepted, by format
    rejected: int = 0
    mask_seconds: float = 0.0
    masked_tokens: int = 0  # sample sites

    def masked(self, seconds: float, sites: int) -> None:
        self.mask_seconds += seconds
        self.masked_tokens += sites


_FORCED_BYTES = 256  # forced bytes tokenized for drafts at most: a long forced literal costs no more


class Constraint:
    def __init__(self, matcher: LLMatcher, stop_tokens: frozenset[int], stats: GrammarStats,
                 tokenizer: LLTokenizer):
        self.matcher = matcher
        self.stop_tokens = stop_tokens
        self.stats = stats
        self.tokenizer = tokenizer
        self.consumed = 0

    @property
    def accepting(self) -> bool:
        """Complete so far (it may also continue)."""
        return self.matcher.is_accepting()

    @property
    def done(self) -> bool:
        """Complete, and nothing but the stop token is allowed."""
        return self.matcher.is_stopped() and not self.matcher.is_error()

    @property
    def error(self) -> str:
        return matcher_error(self.matcher)

    def ends(self, token: int) -> bool:
        """``token`` is the stop token, chosen where the output is complete."""
        return token in self.stop_tokens and self.matcher.is_accepting()

    def consume(self, token: int) -> bool:
        """False if the grammar refuses ``token`` (the matcher then stays failed)."""
        if not self.matcher.consume_token(token):
            return False
        self.consumed += 1
        return True

    def rollback(self, count: int) -> None:
        if not 0 <= count <= self.consumed:
            raise ValueError(f"cannot roll back {count} of {self.consumed} consumed tokens")
        if count and not self.matcher.rollback(count):
            raise RuntimeError(f"the matcher could not roll back: {self.error}")
        self.consumed -= count

    def forced(self, limit: int) -> list[int]:
        """Up to ``limit`` tokens for the bytes the grammar allows alone from here
        (llguidance's canonical tokenization); state unchanged. Past ``_FORCED_BYTES``
        only a prefix is tokenized and its last token, which the bytes after it could
        change, is dropped: the cost is bounded whatever the grammar forces."""
        if limit <= 0 or self.matcher.is_stopped() or self.matcher.is_error():
            return []
        forced = self.matcher.compute_ff_bytes()
        if not forced:
            return []
        if len(forced) <= _FORCED_BYTES:
            return self.matcher.compute_ff_tokens()[:limit]
        ids = self.tokenizer.tokenize_bytes(forced[:_FORCED_BYTES])
        return ids[: min(limit, len(ids) - 1)]

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` the grammar allows; state unchanged."""
        return self.matcher.validate_tokens(list(tokens))


def matcher_error(matcher: LLMatcher, limit: int = 1000) -> str:
    """A matcher's error for a client, at most ``limit`` characters; empty if none."""
    return matcher.get_error().replace("<non-verbose/>", "").strip()[:limit]
