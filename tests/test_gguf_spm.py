"""SentencePiece vocabularies in GGUF files (``tokenizer.ggml.model`` "llama"): a BPE
model trained here with ``sentencepiece`` (identity normalization, whitespace kept, byte
fallback, as Llama/Mistral/Phi-3/Gemma models are), written into the metadata the way
llama.cpp's ``_set_vocab_sentencepiece`` does; the tokenizer built from that metadata
encodes and decodes exactly as ``sentencepiece`` itself, and a file carrying it serves."""

from __future__ import annotations

import io

import gguf
import numpy as np
import pytest

from engine.loading.gguf_tokenizer import GGUFVocab, build_tokenizer
from tests.fixtures.models import CORPUS, build_model

spm = pytest.importorskip("sentencepiece")

TEXTS = ["Hello world", " leading space", "two  spaces and   three", "line\nbreak\ttab\n\n",
         "The quick brown fox jumps over the lazy dog.", "x", "漢字 Ωμέγα ☃ 😀 emoji", "café 3.14159 -42",
         ""]
# llama.cpp token types: NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE.
NORMAL, UNKNOWN, CONTROL, UNUSED, BYTE = 1, 2, 3, 5, 6


def train(vocab_size: int, add_dummy_prefix: bool):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 3), model_writer=model, vocab_size=vocab_size, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, num_threads=1,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=add_dummy_prefix,
        split_digits=True, allow_whitespace_only_pieces=True, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def metadata(sp, arch: str, add_dummy_prefix: bool, size: int | None = None) -> dict:
    """What llama.cpp's converter writes for this model (padded to ``size`` with [PADn])."""
    n = sp.get_piece_size()
    tokens, scores, types = [], [], []
    for i in range(n):
        kind = (UNKNOWN if sp.is_unknown(i) else CONTROL if sp.is_control(i) else UNUSED if sp.is_unused(i)
                else BYTE if sp.is_byte(i) else NORMAL)
        tokens.append(sp.id_to_piece(i)), scores.append(sp.get_score(i)), types.append(kind)
    for i in range(n, size or n):
        tokens.append(f"[PAD{i}]"), scores.append(-1000.0), types.append(UNUSED)
    return {"general.architecture": arch, "tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default",
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
            "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False,
            "tokenizer.ggml.add_space_prefix": add_dummy_prefix}


CASES = [("llama", True), ("phi3", True), ("gemma2", False)]


@pytest.mark.parametrize("arch, prefix", CASES, ids=[a for a, _ in CASES])
def test_encodes_and_decodes_as_sentencepiece(arch, prefix):
    sp = train(700, prefix)
    tokenizer = build_tokenizer(GGUFVocab.from_metadata(metadata(sp, arch, prefix)))
    assert any(sp.is_byte(i) for t in TEXTS for i in sp.encode(t))  # byte fallback is exercised
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        assert ids == [1, *sp.encode(text)], text
        assert tokenizer.decode(ids) == sp.decode(sp.encode(text)) == text, text
    # Control tokens in the text are matched whole, as llama.cpp does when it parses specials.
    assert tokenizer.encode("a</s>").ids[-1] == 2


def test_a_file_with_a_sentencepiece_vocabulary_serves(tmp_path):
    from engine.loading.gguf import prepare_gguf
    from engine.loading.model import load_generation_model
    from tests.gguf_writer import write_gguf
    from tests.test_kernels_models import greedy

    source = build_model("llama", tmp_path / "llama")
    sp = train(600, True)
    meta = metadata(sp, "llama", True, size=640)  # the fixture's embedding rows
    path = write_gguf(source, tmp_path / "spm.gguf", gguf.GGMLQuantizationType.Q8_0, vocab=meta)
    served = load_generation_model(prepare_gguf(path, tmp_path / "cache"))
    for text in TEXTS[:6]:
        assert served.tokenizer.encode(text) == [1, *sp.encode(text)], text
        assert served.tokenizer.decode(sp.encode(text)) == text, text
    out = greedy(served.model, served.tokenizer.encode(TEXTS[4]), 8)
    assert len(out) == 8 and np.all(np.array(out) < 640)
    assert 2 in served.eos_ids
