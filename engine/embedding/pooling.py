"""Sentence embeddings from an MLX BERT encoder (sentence-transformers layout).

Invariant: batches are length-sorted and padded per batch with a mask, so pooling
(mean or CLS, as ``1_Pooling`` declares) never sees padding.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from tokenizers import Tokenizer

from engine.embedding.encoder import EncoderModel, load_encoder
from engine.embedding.folder import pooling_mode, trained_length
from engine.embedding.precision import F32, Precision
from engine.mlx_typed import flatten

__all__ = [
    "EmbeddingModel",
    "EmbeddingResult",
    "load_embedding_model",
    "with_instruction",
    "l2_normalize",
]

DEFAULT_MAX_BATCH_SIZE = 32
# Padded tokens (batch * longest) per forward pass: bounds attention memory.
DEFAULT_MAX_BATCH_TOKENS = 16384
_POOLING_MODES = ("mean", "cls")


@dataclass(frozen=True)
class EmbeddingResult:
    vector: np.ndarray  # float32, shape (dimensions,)
    tokens: int  # tokens actually embedded (incl. special tokens, after truncation)


def with_instruction(text: str, instruction: str | None = None) -> str:
    """Qwen3-Embedding query format; documents are embedded raw (no instruction)."""
    return f"Instruct: {instruction}\nQuery:{text}" if instruction else text


def l2_normalize(v: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return (v / max(norm, eps)).astype(np.float32, copy=False)


class EmbeddingModel:
    classifies = False  # its rows are label logits (Classify), not vectors
    reranks = False  # it scores (query, document) pairs (Rerank)
    sparse = False  # its rows are SPLADE weights over the vocabulary (EmbedSparse), not vectors
    precision: Precision = F32  # what its products run in (load_embedder sets it)
    labels: tuple[str, ...] = ()  # a classifier's label names, in logit order

    def weights_bytes(self) -> int:
        """Bytes of the arrays of every module it holds (an encoder, a decoder, a head), each once,
        and of the encoder's packed product weights."""
        seen: dict[int, int] = {}
        held = 0
        for value in vars(self).values():
            if isinstance(value, nn.Module):
                seen.update((id(a), a.nbytes) for _, a in flatten(value.parameters()))
                held += value.kernel_bytes() if isinstance(value, EncoderModel) else 0
        return sum(seen.values()) + held

    def scores(self, logits: np.ndarray) -> np.ndarray:
        """A classifier's label scores for one input's logits."""
        raise TypeError(f"{type(self).__name__} classifies nothing")

    def encode_pairs(self, query: str, documents: Sequence[str]) -> tuple[list[list[int]], list[int]]:
        """A reranker's input ids per (query, document) pair; the indices of the pairs cut."""
        raise TypeError(f"{type(self).__name__} scores no pairs")

    def __init__(
        self,
        encoder: EncoderModel,
        tokenizer: Tokenizer,
        *,
        pooling: str = "mean",
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        max_length: int | None = None,
        name: str = "",
    ):
        if pooling not in _POOLING_MODES:
            raise ValueError(f"pooling must be one of {_POOLING_MODES}, got {pooling!r}")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        limit = encoder.config.max_position_embeddings
        max_length = limit if max_length is None else max_length
        if not 2 <= max_length <= limit:
            raise ValueError(f"max_length must be in [2, {limit}], got {max_length}")
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max(max_batch_tokens, max_length)
        self.max_length = max_length
        self.name = name
        # Padding is per batch; truncation at the model's position limit.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_length)
        self._pad_id = encoder.config.pad_token_id
        # MLX evaluation is not meant to be driven from several threads at once.
        self._lock = threading.Lock()

    @classmethod
    def load(
        cls,
        model_dir: Path,
        *,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        max_length: int | None = None,
    ) -> "EmbeddingModel":
        model_dir = Path(model_dir)
        encoder = load_encoder(model_dir)
        tok_path = model_dir / "tokenizer.json"
        if not tok_path.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {model_dir}")
        tokenizer = Tokenizer.from_file(str(tok_path))
        return cls(
            encoder,
            tokenizer,
            pooling=pooling_mode(model_dir),
            max_batch_size=max_batch_size,
            max_batch_tokens=max_batch_tokens,
            max_length=max_length or trained_length(model_dir, encoder.config.max_position_embeddings),
            name=model_dir.name,
        )

    @property
    def hidden_size(self) -> int:
        return self.encoder.config.hidden_size

    def _validate(self, texts: Sequence[str], dimensions: int | None) -> None:
        if isinstance(texts, str):
            raise ValueError("texts must be a list of strings, not a single string")
        if len(texts) == 0:
            raise ValueError("input must contain at least one text")
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"input[{i}] must be a string, got {type(t).__name__}")
        if dimensions is not None:
            if isinstance(dimensions, bool) or not isinstance(dimensions, (int, np.integer)):
                raise ValueError(f"dimensions must be an integer, got {dimensions!r}")
            if not 1 <= dimensions <= self.hidden_size:
                raise ValueError(
                    f"dimensions must be between 1 and {self.hidden_size} "
                    f"(the model's hidden size), got {dimensions}"
                )

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        batches: list[list[int]] = []
        cur: list[int] = []
        for i in order:
            longest = lengths[i]  # ascending: the newcomer is the longest
            if cur and (
                len(cur) >= self.max_batch_size
                or (len(cur) + 1) * longest > self.max_batch_tokens
            ):
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
        return batches

    def _forward(self, ids_list: list[list[int]]) -> np.ndarray:
        """Pooled (unnormalized) float32 vectors, shape (B, hidden)."""
        L = max(len(ids) for ids in ids_list)
        ids = np.full((len(ids_list), L), self._pad_id, dtype=np.int32)
        mask = np.zeros((len(ids_list), L), dtype=np.int32)
        for r, row in enumerate(ids_list):
            ids[r, : len(row)] = row
            mask[r, : len(row)] = 1
        with self._lock:
            input_ids = mx.array(ids)
            attn = mx.array(mask)
            h = self.encoder(input_ids, attn).astype(mx.float32)
            if self.pooling == "cls":
                pooled = h[:, 0, :]
            else:
                m = attn.astype(mx.float32)[:, :, None]
                pooled = (h * m).sum(axis=1) / mx.maximum(m.sum(axis=1), 1e-9)
            mx.eval(pooled)
            return np.array(pooled, dtype=np.float32)

    def embed_batches(
        self,
        texts: Sequence[str],
        *,
        instruction: str | None = None,
        normalize: bool = True,
        dimensions: int | None = None,
    ) -> Iterator[tuple[int, EmbeddingResult]]:
        """Yield ``(input_index, result)`` batch by batch, shortest first (out of input order);
        arguments are validated before the first ``next()``."""
        self._validate(texts, dimensions)
        ids_list = self._encode(texts, instruction)
        batches = self._batches([len(ids) for ids in ids_list])
        return self._run(ids_list, batches, normalize, dimensions)

    def prepare_ids(self, ids_list: Sequence[Sequence[int]]) -> list[list[int]]:
        """Inputs already tokenized, checked: each must fit ``max_length`` and the vocabulary.
        Trailing padding (a tokenizer that pads to a fixed length) is dropped: it is never part
        of an input."""
        unpadded = [list(_unpadded(ids, getattr(self, "_pad_id", None))) for ids in ids_list]
        for i, ids in enumerate(unpadded):
            if not 1 <= len(ids) <= self.max_length:
                raise ValueError(f"input[{i}] must hold 1 to {self.max_length} token ids, got {len(ids)}")
            if (bad := next((t for t in ids if not 0 <= t < self.vocab_size), None)) is not None:
                raise ValueError(f"input[{i}] holds token id {bad}, outside the vocabulary of {self.vocab_size}")
        return unpadded

    def encode(self, texts: Sequence[str], instruction: str | None = None) -> tuple[list[list[int]], list[int]]:
        """Token ids per text, as ``embed`` feeds them (special tokens, instruction), cut to the
        input limit; and the indices of the texts that had to be cut."""
        encodings = self.tokenizer.encode_batch([with_instruction(t, instruction) for t in texts],
                                                add_special_tokens=True)
        return [list(e.ids) for e in encodings], [i for i, e in enumerate(encodings) if e.overflowing]

    def _run(
        self,
        ids_list: list[list[int]],
        batches: list[list[int]],
        normalize: bool,
        dimensions: int | None,
    ) -> Iterator[tuple[int, EmbeddingResult]]:
        for batch in batches:
            pooled = self._forward([ids_list[i] for i in batch])
            for row, i in zip(pooled, batch):
                vec = row[:dimensions] if dimensions is not None else row
                vec = l2_normalize(vec) if normalize else vec.copy()
                yield i, EmbeddingResult(vector=vec, tokens=len(ids_list[i]))

    def embed(
        self,
        texts: Sequence[str],
        *,
        instruction: str | None = None,
        normalize: bool = True,
        dimensions: int | None = None,
    ) -> list[EmbeddingResult]:
        """Embed ``texts``; results in input order."""
        out: dict[int, EmbeddingResult] = {}
        for i, res in self.embed_batches(
            texts, instruction=instruction, normalize=normalize, dimensions=dimensions
        ):
            out[i] = res
        return [out[i] for i in range(len(texts))]  # every text answered, or KeyError

    def count_tokens(self, texts: Sequence[str], *, instruction: str | None = None) -> list[int]:
        """Token counts ``embed`` would report, without running the encoder."""
        self._validate(texts, None)
        return [len(ids) for ids in self._encode(texts, instruction)]

    def _encode(self, texts: Sequence[str], instruction: str | None) -> list[list[int]]:
        """Token ids per input: special tokens added, truncated to ``max_length``."""
        encodings = self.tokenizer.encode_batch(
            [with_instruction(t, instruction) for t in texts], add_special_tokens=True
        )
        return [e.ids for e in encodings]

    @property
    def vocab_size(self) -> int:
        return self.encoder.config.vocab_size

    def tokenize(self, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        encoding = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return list(encoding.ids), list(encoding.tokens)

    def detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def _unpadded(ids: Sequence[int], pad_id: int | None) -> Sequence[int]:
    end = len(ids)
    while end > 1 and pad_id is not None and ids[end - 1] == pad_id:
        end -= 1
    return ids[:end]


def load_embedding_model(model_dir: Path, **kwargs) -> EmbeddingModel:
    return EmbeddingModel.load(model_dir, **kwargs)
