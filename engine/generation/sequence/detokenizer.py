"""Incremental detokenization matching ``tokenizer.decode(all_tokens)``; an incomplete
UTF-8 character (U+FFFD) is held back until a later token completes it."""

from __future__ import annotations

from typing import Callable, Sequence

_CONTEXT = 4  # prompt tokens kept so the first output token decodes with its left context


class IncrementalDetokenizer:
    def __init__(self, decode: Callable[[list[int]], str], prompt: Sequence[int] = ()):
        self._decode = decode
        self._tokens = list(prompt[-_CONTEXT:])
        self._prefix = 0
        self._read = len(self._tokens)

    def add(self, token: int) -> str:
        """The text ``token`` completes (possibly empty)."""
        self._tokens.append(token)
        before = self._decode(self._tokens[self._prefix : self._read])
        after = self._decode(self._tokens[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._tokens)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        """Text still held back."""
        before = self._decode(self._tokens[self._prefix : self._read])
        after = self._decode(self._tokens[self._prefix :])
        self._prefix = self._read = len(self._tokens)
        return after[len(before) :]
