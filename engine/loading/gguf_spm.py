"""SentencePiece vocabularies of GGUF files (``tokenizer.ggml.model`` "llama": Llama 1-2,
Mistral, Phi-3, Gemma) as a ``tokenizers`` Tokenizer.

transformers' GGUF tokenizer builders make the model (merges recovered from the scores,
or from the file order for Gemma; byte fallback on ``<0xNN>`` tokens; control and
user-defined tokens whole). Around it the text is prepared as llama.cpp's SPM tokenizer
does it: every space becomes U+2581, one more in front when ``add_space_prefix`` (default
true), no pre-split; decoding drops that one space again.
"""

from __future__ import annotations

from typing import Any, Mapping

from tokenizers import Tokenizer, decoders, normalizers, processors

from ..errors import UnsupportedModel

__all__ = ["sentencepiece_tokenizer"]

_SPACE = "\u2581"
TOKEN_TYPE_BYTE = 6


def sentencepiece_tokenizer(vocab: Any, architecture: str, bos: str | None) -> Tokenizer:
    """The Tokenizer of a SentencePiece ``vocab`` (a ``GGUFVocab``), BOS added when ``bos``."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    except ImportError as exc:  # an older transformers without the GGUF builders
        raise UnsupportedModel(f"GGUF SentencePiece vocabularies need transformers' GGUF builders: {exc}") from exc
    if not vocab.scores and architecture not in ("gemma", "gemma2", "gemma3"):
        raise UnsupportedModel("GGUF SentencePiece vocabulary without tokenizer.ggml.scores is not served")
    tokenizer, _ = convert_gguf_tokenizer(architecture, _tokenizer_dict(vocab))
    prefix = vocab.add_space_prefix
    replace = normalizers.Replace(" ", _SPACE)
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend(_SPACE), replace]) if prefix else replace
    tokenizer.pre_tokenizer = None
    steps = [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence(steps + ([decoders.Strip(content=" ", left=1)] if prefix else []))
    if bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab.bos_id)])
    else:
        tokenizer.post_processor = None
    _check_ids(tokenizer, vocab)
    return tokenizer


def _tokenizer_dict(vocab: Any) -> dict[str, Any]:
    """The dictionary transformers' builders read (its names for llama.cpp's ``tokenizer.ggml.*``)."""
    out: Mapping[str, Any] = {
        "tokenizer_type": "llama",
        "pre_tokenizer_type": vocab.pre,
        "tokens": list(vocab.tokens),
        "scores": list(vocab.scores),
        "token_type": list(vocab.token_types),
        "bos_token_id": vocab.bos_id,
        "eos_token_id": vocab.eos_id,
        "unk_token_id": vocab.unk_id,
        "pad_token_id": vocab.pad_id,
        "add_prefix_space": vocab.add_space_prefix,
    }
    return {key: value for key, value in out.items() if value is not None and value != []}


def _check_ids(tokenizer: Tokenizer, vocab: Any) -> None:
    """Every token of the file keeps its own id (the model's rows are indexed by them)."""
    ids = tokenizer.get_vocab(with_added_tokens=True)
    for i, text in enumerate(vocab.tokens):
        if ids.get(text, i) != i:
            raise UnsupportedModel(f"GGUF SentencePiece token {text!r} (id {i}) maps to id {ids[text]}")
