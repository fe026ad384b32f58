"""The incremental detokenizer's pending window: text held back behind an incomplete UTF-8
character is bounded, and what it streams still equals the whole decode."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from engine.generation.core.sequence.delivery import MAX_PENDING, IncrementalDetokenizer


@pytest.fixture(scope="module")
def tok(fixture_models):
    return Tokenizer.from_file(str(fixture_models["llama"] / "tokenizer.json"))


def byte_token(tok, byte: int) -> int:
    """The byte-level token of one raw byte (every byte-level vocabulary has one)."""
    token = tok.token_to_id(_bytes_to_unicode()[byte])
    assert token is not None
    return token


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class Counting:
    """A decode that records the longest window it was asked for."""

    def __init__(self, tok):
        self.tok, self.longest = tok, 0

    def __call__(self, ids):
        self.longest = max(self.longest, len(ids))
        return self.tok.decode(ids)


def test_forced_byte_tokens_advance_the_window(tok):
    """A byte that never completes a character (0xFF), forced 500 times: the detokenizer emits it
    as U+FFFD as it goes instead of re-decoding an ever longer window."""
    prompt = tok.encode("Hi").ids
    ids = [byte_token(tok, 0xFF)] * 500
    decode = Counting(tok)
    detok = IncrementalDetokenizer(decode, prompt)
    pieces = [detok.add(i) for i in ids]
    assert decode.longest <= MAX_PENDING + 8
    assert sum(p.count("\ufffd") for p in pieces) >= 500 - MAX_PENDING - 1
    pieces.append(detok.flush())
    assert "".join(pieces) == tok.decode(prompt + ids)[len(tok.decode(prompt)):]


def test_lead_bytes_without_continuations_advance_the_window(tok):
    """Lead bytes of 3-byte characters that are never continued: each is final once later bytes come."""
    prompt = tok.encode("Hi").ids
    ids = [byte_token(tok, 0xE4)] * 300
    decode = Counting(tok)
    detok = IncrementalDetokenizer(decode, prompt)
    pieces = [detok.add(i) for i in ids] + [detok.flush()]
    assert decode.longest <= MAX_PENDING + 8
    assert "".join(pieces) == tok.decode(prompt + ids)[len(tok.decode(prompt)):]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["a", " b", "é", "日", "😀", "\n"]),
                          st.integers(0x80, 0xFF)), min_size=1, max_size=60))
def test_streamed_text_equals_the_whole_decode_with_raw_bytes_mixed_in(tok, items):
    """Raw byte tokens (continuations, lead bytes, invalid bytes) between ordinary tokens: the
    concatenated stream is exactly the decode of everything."""
    prompt = tok.encode("Hi").ids
    ids = []
    for item in items:
        ids.extend(tok.encode(item).ids if isinstance(item, str) else [byte_token(tok, item)])
    detok = IncrementalDetokenizer(lambda t: tok.decode(t), prompt)
    pieces = [detok.add(i) for i in ids] + [detok.flush()]
    assert "".join(pieces) == tok.decode(prompt + ids)[len(tok.decode(prompt)):]
