"""Incremental detokenization that never emits a broken UTF-8 character.

Text is the difference between decoding a short window of tokens with and without
the newest ones, so it matches ``tokenizer.decode(all_tokens)`` for any Hugging Face
tokenizer (byte-level BPE, SentencePiece, WordPiece). Text ending in an incomplete
UTF-8 sequence (U+FFFD) is held back until the next token completes it.
"""

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
        """Adds one token; returns the text it completes (possibly empty)."""
        self._tokens.append(token)
        before = self._decode(self._tokens[self._prefix : self._read])
        after = self._decode(self._tokens[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._tokens)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        """Returns text still held back (an incomplete character decodes as U+FFFD)."""
        before = self._decode(self._tokens[self._prefix : self._read])
        after = self._decode(self._tokens[self._prefix :])
        self._prefix = self._read = len(self._tokens)
        return after[len(before) :]
