"""Build Hugging Face tokenizer files from a GGUF file's vocabulary: byte-level BPE here,
SentencePiece in ``gguf_spm``.

Invariant: the pre-tokenizer splits text exactly as llama.cpp does for ``tokenizer.ggml.pre``;
every token keeps the id the file gives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from ..errors import UnsupportedModel

__all__ = [
    "GGUFVocab",
    "build_tokenizer",
    "pre_tokenizer_for",
    "tokenizer_config",
    "special_tokens_map",
]

# llama.cpp token types (llama_token_type in llama.h / gguf TokenType).
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# Pre-tokenizers whose llama.cpp split is the GPT-2 regex (optionally digits isolated first).
_GPT2_PRE = frozenset({"default", "gpt2", "mpt", "olmo", "jais"})
_DIGIT_SPLIT_PRE = frozenset(
    {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
)
# The Llama 3 split (llama.cpp's LLAMA_VOCAB_PRE_TYPE_LLAMA3).
_LLAMA3_PRE = frozenset({"llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx"})
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2 and Qwen3 (LLAMA_VOCAB_PRE_TYPE_QWEN2): Llama 3's split with single digits.
_QWEN2_PRE = frozenset({"qwen2"})
_QWEN2_REGEX = _LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")


@dataclass(frozen=True)
class GGUFVocab:
    """The tokenizer part of a GGUF file's metadata."""

    model: str
    pre: str
    tokens: Sequence[str]
    merges: Sequence[str]
    token_types: Sequence[int]
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    chat_template: str | None
    scores: Sequence[float] = ()
    add_space_prefix: bool = True  # SentencePiece: llama.cpp's default
    architecture: str = "llama"

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> "GGUFVocab":
        """Read the ``tokenizer.*`` keys of GGUF metadata."""

        def opt_int(key: str) -> int | None:
            value = meta.get(key)
            return None if value is None else int(value.item() if hasattr(value, "item") else value)

        types = meta.get("tokenizer.ggml.token_type")
        tokens = list(meta["tokenizer.ggml.tokens"])
        model = str(meta.get("tokenizer.ggml.model", ""))
        add_bos = opt_int("tokenizer.ggml.add_bos_token")
        scores = meta.get("tokenizer.ggml.scores")
        return cls(
            model=model,
            pre=str(meta.get("tokenizer.ggml.pre", "default")),
            tokens=tokens,
            merges=list(meta.get("tokenizer.ggml.merges", [])),
            token_types=[1] * len(tokens) if types is None else [int(t) for t in _list(types)],
            bos_id=opt_int("tokenizer.ggml.bos_token_id"),
            eos_id=opt_int("tokenizer.ggml.eos_token_id"),
            unk_id=opt_int("tokenizer.ggml.unknown_token_id"),
            pad_id=opt_int("tokenizer.ggml.padding_token_id"),
            add_bos=bool(add_bos) if add_bos is not None else model == "llama",  # llama.cpp's default
            chat_template=meta.get("tokenizer.chat_template"),
            scores=() if scores is None else [float(x) for x in _list(scores)],
            add_space_prefix=bool(meta.get("tokenizer.ggml.add_space_prefix", True)),
            architecture=str(meta.get("general.architecture", "llama")),
        )

    def token(self, token_id: int | None) -> str | None:
        """The token text for an id, or None when unset or out of range."""
        if token_id is None or not 0 <= token_id < len(self.tokens):
            return None
        return self.tokens[token_id]


def _list(values) -> list:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def pre_tokenizer_for(pre: str) -> pre_tokenizers.PreTokenizer:
    """The ``tokenizers`` pre-tokenizer reproducing llama.cpp's split for ``pre``."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _GPT2_PRE:
        return byte_level
    if pre in _DIGIT_SPLIT_PRE:
        digits = pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated")
        return pre_tokenizers.Sequence([digits, byte_level])
    if pre in _LLAMA3_PRE or pre in _QWEN2_PRE:
        split = pre_tokenizers.Split(Regex(_LLAMA3_REGEX if pre in _LLAMA3_PRE else _QWEN2_REGEX),
                                     behavior="isolated")
        no_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        return pre_tokenizers.Sequence([split, no_regex])
    raise UnsupportedModel(f"GGUF pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not served")


def _added_tokens(vocab: GGUFVocab, kind: int) -> list[AddedToken]:
    """Tokens of one llama.cpp token type as added tokens (control tokens: special)."""
    special = kind == TOKEN_TYPE_CONTROL
    return [
        AddedToken(text, special=special, normalized=False)
        for text, token_type in zip(vocab.tokens, vocab.token_types)
        if token_type == kind
    ]


def build_tokenizer(vocab: GGUFVocab) -> Tokenizer:
    """A ``Tokenizer`` equivalent to llama.cpp's for this vocabulary."""
    if vocab.model == "llama":
        from .gguf_spm import sentencepiece_tokenizer

        return sentencepiece_tokenizer(vocab, vocab.architecture, vocab.token(vocab.bos_id) if vocab.add_bos else None)
    if vocab.model != "gpt2":
        raise UnsupportedModel(f"GGUF tokenizer model {vocab.model!r} is not served: "
                               "'gpt2' (byte-level BPE) and 'llama' (SentencePiece) are")
    ids = {text: i for i, text in enumerate(vocab.tokens)}
    merges = [_merge_pair(merge) for merge in vocab.merges]
    tokenizer = Tokenizer(models.BPE(vocab=ids, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizer_for(vocab.pre)
    tokenizer.decoder = decoders.ByteLevel()
    bos = vocab.token(vocab.bos_id)
    if vocab.add_bos and bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab.bos_id)]
        )
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens(_added_tokens(vocab, TOKEN_TYPE_CONTROL))
    tokenizer.add_tokens(_added_tokens(vocab, TOKEN_TYPE_USER_DEFINED))
    return tokenizer


def special_tokens_map(vocab: GGUFVocab) -> dict[str, str]:
    """``special_tokens_map.json`` content: bos/eos/unk/pad tokens that the file sets."""
    named = {
        "bos_token": vocab.token(vocab.bos_id),
        "eos_token": vocab.token(vocab.eos_id),
        "unk_token": vocab.token(vocab.unk_id),
        "pad_token": vocab.token(vocab.pad_id),
    }
    return {key: value for key, value in named.items() if value is not None}


def tokenizer_config(vocab: GGUFVocab, model_max_length: int) -> dict[str, Any]:
    """``tokenizer_config.json`` content for ``PreTrainedTokenizerFast``."""
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special_tokens_map(vocab),
        "add_bos_token": vocab.add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
    }
    if vocab.chat_template:
        config["chat_template"] = vocab.chat_template
    return config


def _merge_pair(merge: str) -> tuple[str, str]:
    """A BPE merge as written in the file ("a b") as its pair."""
    left, space, right = merge.partition(" ")
    if not space:
        raise UnsupportedModel(f"GGUF tokenizer merge {merge[:40]!r} is not two tokens joined by a space")
    return left, right
