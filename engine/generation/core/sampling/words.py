"""A request's texts as token sequences (bad words, DRY's sequence breakers), tokenized once
where the sequence is built, and the bans they impose.

Invariants: each text is tokenized as written and with a leading space (no special
tokens), equal sequences once; a bad word's last token is banned exactly where the output
(with any drafts counted as emitted) ends with the word's other tokens, so the ban is a
function of the history alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from ....errors import InvalidRequest
from ....requests import SamplingOptions

MAX_WORD_TOKENS = 16  # a bad word's tokens, as written


@dataclass(frozen=True)
class SamplingTokens:
    bad_words: tuple[tuple[int, ...], ...] = ()
    breakers: tuple[tuple[int, ...], ...] = ()  # DRY's, when DRY is on


def sampling_tokens(options: SamplingOptions, encode: Callable[[str], Sequence[int]]) -> SamplingTokens:
    """Tokenizes what ``options`` needs; a bad word over ``MAX_WORD_TOKENS`` is refused by name."""
    words = []
    for i, word in enumerate(options.bad_words):
        variants = _variants(word, encode)
        if variants and len(variants[0]) > MAX_WORD_TOKENS:
            raise InvalidRequest("sampling.bad_words", f"each word at most {MAX_WORD_TOKENS} tokens; word {i} "
                                                       f"has {len(variants[0])}")
        words += variants
    dry = options.dry
    breakers = [v for text in dry.sequence_breakers for v in _variants(text, encode)] \
        if dry is not None and dry.multiplier > 0 else []
    return SamplingTokens(_unique(words), _unique(breakers))


def _variants(text: str, encode: Callable[[str], Sequence[int]]) -> list[tuple[int, ...]]:
    """The text as written first, then with a leading space; empty tokenizations left out."""
    texts = [text] if not text or text.startswith(" ") else [text, " " + text]
    return [ids for ids in (tuple(int(t) for t in encode(t)) for t in texts) if ids]


def _unique(sequences: Iterable[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
    return tuple(dict.fromkeys(sequences))


def banned(words: Sequence[tuple[int, ...]], output: Sequence[int]) -> set[int]:
    """The last tokens of the words whose other tokens end ``output``."""
    out = set()
    for word in words:
        head = len(word) - 1
        if head == 0 or (len(output) >= head and tuple(output[len(output) - head:]) == word[:-1]):
            out.add(word[-1])
    return out
