"""Packed Embed responses (``EmbedRequest.packed``) decoded into Python arrays.

A packed response message carries up to 64 inputs' vectors as one little-endian byte
string of one element type (``pb.PackedEmbeddings``): float32 (4 bytes a value), float16
(2 bytes, IEEE half), int8 (1 signed byte a value, with a scale per vector: value ~ int8 x
scale) or ubinary (a bit per value, 1 where the value is above 0, the first value in the
most significant bit of the first byte, ceil(dimensions / 8) bytes a vector).
"""

from __future__ import annotations

import dataclasses
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Union

from . import pb

#: What ``embedding_type=`` takes besides a ``pb.EmbeddingType``: ``"float32"``,
#: ``"float16"``, ``"int8"`` or ``"ubinary"`` (any case, with or without the
#: ``EMBEDDING_TYPE_`` prefix).
EmbeddingTypeArg = Union[str, int]

#: A decoded vector: ``array('f')`` (float32, float16), ``array('b')`` (int8) or ``bytes`` (ubinary).
Vector = Union["array[float]", "array[int]", bytes]


def embedding_type(value: EmbeddingTypeArg) -> int:
    """The ``pb.EmbeddingType`` that ``value`` names."""
    if isinstance(value, int):
        return value
    name = value.upper()
    try:
        return pb.EmbeddingType.Value(name if name.startswith("EMBEDDING_TYPE_") else f"EMBEDDING_TYPE_{name}")
    except ValueError:
        choices = ", ".join(n.removeprefix("EMBEDDING_TYPE_").lower() for n in pb.EmbeddingType.keys()[1:])
        raise ValueError(f"unknown embedding type {value!r} (one of {choices})") from None


def _kind(value: int) -> int:
    """UNSPECIFIED reads as FLOAT32, as on the server."""
    return pb.EMBEDDING_TYPE_FLOAT32 if value == pb.EMBEDDING_TYPE_UNSPECIFIED else value


def vector_bytes(kind: int, dimensions: int) -> int:
    """Bytes one vector of ``dimensions`` values takes in ``PackedEmbeddings.data``."""
    kind = _kind(kind)
    if kind == pb.EMBEDDING_TYPE_FLOAT32:
        return 4 * dimensions
    if kind == pb.EMBEDDING_TYPE_FLOAT16:
        return 2 * dimensions
    if kind == pb.EMBEDDING_TYPE_INT8:
        return dimensions
    if kind == pb.EMBEDDING_TYPE_UBINARY:
        return (dimensions + 7) // 8
    raise ValueError(f"unknown embedding type {kind}")


def _floats(data: bytes) -> array:
    values = array("f")
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def _decode(kind: int, chunk: bytes, dimensions: int) -> Vector:
    if kind == pb.EMBEDDING_TYPE_FLOAT32:
        return _floats(chunk)
    if kind == pb.EMBEDDING_TYPE_FLOAT16:
        return array("f", struct.unpack(f"<{dimensions}e", chunk))
    if kind == pb.EMBEDDING_TYPE_INT8:
        values = array("b")
        values.frombytes(chunk)
        return values
    return bytes(chunk)


def decode_packed(packed: pb.PackedEmbeddings) -> list[Vector]:
    """One message's vectors, in the order of ``packed.indices``: float32 and float16 as
    ``array('f')``, int8 as ``array('b')`` (``packed.scales`` holds their scales) and
    ubinary as ``bytes`` of packed bits. Raises ValueError when ``data`` does not hold
    exactly ``len(indices)`` vectors of ``dimensions`` values."""
    kind, count, dimensions = _kind(packed.type), len(packed.indices), packed.dimensions
    size = vector_bytes(kind, dimensions)
    if dimensions < 0 or len(packed.data) != count * size:
        raise ValueError(f"packed embeddings: {len(packed.data)} bytes of data for {count} vectors of "
                         f"{dimensions} {pb.EmbeddingType.Name(kind)} values")
    if len(packed.tokens) not in (0, count):
        raise ValueError(f"packed embeddings: {len(packed.tokens)} token counts for {count} vectors")
    if kind == pb.EMBEDDING_TYPE_INT8 and len(packed.scales) != count:
        raise ValueError(f"packed embeddings: {len(packed.scales)} scales for {count} int8 vectors")
    data = bytes(packed.data)
    return [_decode(kind, data[i * size:(i + 1) * size], dimensions) for i in range(count)]


def dequantize(values: Iterable[int], scale: float) -> array:
    """An int8 vector's approximate float values (value ~ int8 x scale), as ``array('f')``."""
    return array("f", (v * scale for v in values))


def unpack_bits(data: bytes, dimensions: int) -> list[int]:
    """A ubinary vector's ``dimensions`` bits (1: the value was above 0), first value first."""
    if len(data) * 8 < dimensions:
        raise ValueError(f"{len(data)} bytes hold fewer than {dimensions} bits")
    return [(data[i >> 3] >> (7 - (i & 7))) & 1 for i in range(dimensions)]


def hamming(a: bytes, b: bytes) -> int:
    """The Hamming distance of two ubinary vectors (bits that differ)."""
    if len(a) != len(b):
        raise ValueError(f"ubinary vectors of {len(a)} and {len(b)} bytes")
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).bit_count()


@dataclasses.dataclass
class Embeddings:
    """The vectors of a packed Embed call, in the order of the request's inputs.

    ``vectors[i]`` is input i's vector: ``array('f')`` for float32 and float16,
    ``array('b')`` for int8 (``scales[i]`` is its scale; :meth:`floats` dequantizes) and
    ``bytes`` for ubinary (``dimensions`` bits; :func:`unpack_bits`, :func:`hamming`).
    Iterating, indexing and ``len()`` go over ``vectors``.
    """

    #: ``pb.EmbeddingType`` of the vectors (never UNSPECIFIED: float32 is FLOAT32).
    type: int = pb.EMBEDDING_TYPE_FLOAT32
    #: Values per vector (ubinary: bits).
    dimensions: int = 0
    vectors: list[Vector] = dataclasses.field(default_factory=list)
    #: Tokens each input used (after truncation to the model's limit).
    tokens: list[int] = dataclasses.field(default_factory=list)
    #: INT8: each vector's scale (value ~ int8 x scale); empty for the other types.
    scales: list[float] = dataclasses.field(default_factory=list)
    #: Response messages the server sent (up to 64 vectors each).
    messages: int = 0

    @classmethod
    def from_responses(cls, responses: Iterable[pb.EmbedResponse], count: int | None = None) -> Embeddings:
        """Gathers packed responses into input order. ``count`` (the request's number of
        inputs), when given, must be covered exactly. Raises ValueError on a response that is
        not packed, mixed types or dimensions, or an index out of range or seen twice."""
        responses = list(responses)
        decoded: dict[int, tuple[Vector, int, float | None]] = {}
        kind = dimensions = None
        for response in responses:
            if not response.HasField("packed"):
                raise ValueError(f"embed response for input {response.index} is not packed")
            packed = response.packed
            if kind is None:
                kind, dimensions = _kind(packed.type), packed.dimensions
            elif (_kind(packed.type), packed.dimensions) != (kind, dimensions):
                raise ValueError(f"packed embeddings of {pb.EmbeddingType.Name(_kind(packed.type))} x "
                                 f"{packed.dimensions} after {pb.EmbeddingType.Name(kind)} x {dimensions}")
            vectors = decode_packed(packed)
            for j, index in enumerate(packed.indices):
                if index < 0 or (count is not None and index >= count) or index in decoded:
                    raise ValueError(f"packed embeddings: index {index} out of range or repeated")
                decoded[index] = (vectors[j], packed.tokens[j] if packed.tokens else 0,
                                  packed.scales[j] if kind == pb.EMBEDDING_TYPE_INT8 else None)
        total = len(decoded) if count is None else count
        if sorted(decoded) != list(range(total)):
            missing = sorted(set(range(total)) - set(decoded))
            raise ValueError(f"packed embeddings: no vector for inputs {missing[:8]}")
        order = [decoded[i] for i in range(total)]
        return cls(
            type=kind if kind is not None else pb.EMBEDDING_TYPE_FLOAT32,
            dimensions=dimensions or 0,
            vectors=[v for v, _, _ in order],
            tokens=[t for _, t, _ in order],
            scales=[s for _, _, s in order] if kind == pb.EMBEDDING_TYPE_INT8 else [],
            messages=len(responses),
        )

    def __len__(self) -> int:
        return len(self.vectors)

    def __iter__(self) -> Iterator[Vector]:
        return iter(self.vectors)

    def __getitem__(self, i: int) -> Vector:
        return self.vectors[i]

    def floats(self) -> list[array]:
        """Every vector as ``array('f')``: float32 and float16 as they are, int8
        dequantized (int8 x scale), ubinary as its 0/1 bits."""
        if self.type == pb.EMBEDDING_TYPE_INT8:
            return [dequantize(v, s) for v, s in zip(self.vectors, self.scales)]
        if self.type == pb.EMBEDDING_TYPE_UBINARY:
            return [array("f", unpack_bits(v, self.dimensions)) for v in self.vectors]
        return list(self.vectors)

    def numpy(self) -> Any:
        """The vectors as one numpy array (numpy is optional: ImportError without it):
        float32 ``[n, dimensions]`` for float32 and float16, int8 ``[n, dimensions]`` for
        int8 (``np.asarray(e.scales)[:, None]`` times it dequantizes), uint8
        ``[n, ceil(dimensions / 8)]`` of packed bits for ubinary (``np.unpackbits(...,
        axis=-1, count=dimensions)`` unpacks them)."""
        import numpy as np

        dtype = {pb.EMBEDDING_TYPE_INT8: np.int8, pb.EMBEDDING_TYPE_UBINARY: np.uint8}.get(self.type, np.float32)
        width = vector_bytes(self.type, self.dimensions) // np.dtype(dtype).itemsize
        if not self.vectors:
            return np.zeros((0, width), dtype)
        return np.stack([np.frombuffer(v, dtype) for v in self.vectors])


def gather(request: pb.EmbedRequest, responses: Sequence[pb.EmbedResponse]) -> Any:
    """What ``embed`` returns: packed, the :class:`Embeddings`; otherwise the responses by index."""
    if request.packed:
        return Embeddings.from_responses(responses, len(request.inputs))
    return sorted(responses, key=lambda r: r.index)
