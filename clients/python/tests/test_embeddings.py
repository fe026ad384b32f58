"""Packed Embed responses decoded without a server: PackedEmbeddings messages built by
hand with known bytes for each element type."""

from __future__ import annotations

from array import array

import pytest

from mlxgrpc_client import Embeddings, decode_packed, dequantize, embed_request, hamming, pb, unpack_bits


def _response(**fields) -> pb.EmbedResponse:
    return pb.EmbedResponse(packed=pb.PackedEmbeddings(**fields))


def test_embed_request_packed_and_type():
    req = embed_request(["a", "b"])
    assert (req.packed, req.embedding_type) == (False, pb.EMBEDDING_TYPE_UNSPECIFIED)
    for value, want in (("float32", pb.EMBEDDING_TYPE_FLOAT32), ("FLOAT16", pb.EMBEDDING_TYPE_FLOAT16),
                        ("int8", pb.EMBEDDING_TYPE_INT8), ("EMBEDDING_TYPE_UBINARY", pb.EMBEDDING_TYPE_UBINARY),
                        (pb.EMBEDDING_TYPE_INT8, pb.EMBEDDING_TYPE_INT8)):
        req = embed_request("a", packed=True, embedding_type=value)
        assert req.packed and req.embedding_type == want
    # A smaller type without packed is sent as it is: the server refuses it by name.
    assert embed_request("a", embedding_type="int8").embedding_type == pb.EMBEDDING_TYPE_INT8
    with pytest.raises(ValueError, match="float32, float16, int8, ubinary"):
        embed_request("a", packed=True, embedding_type="int4")


def test_float32():
    # 1.0, -2.5 | 0.5, 0.0, little-endian IEEE single
    data = bytes.fromhex("0000803f" "000020c0" "0000003f" "00000000")
    packed = pb.PackedEmbeddings(indices=[3, 1], tokens=[4, 5], dimensions=2, type=pb.EMBEDDING_TYPE_FLOAT32, data=data)
    assert [list(v) for v in decode_packed(packed)] == [[1.0, -2.5], [0.5, 0.0]]
    assert all(isinstance(v, array) and v.typecode == "f" for v in decode_packed(packed))
    packed.type = pb.EMBEDDING_TYPE_UNSPECIFIED  # float32 too
    assert [list(v) for v in decode_packed(packed)] == [[1.0, -2.5], [0.5, 0.0]]


def test_float16_exact_halves():
    # 1.0 = 0x3c00, -2.0 = 0xc000, 0.5 = 0x3800, 65504 = 0x7bff (largest), 2**-24 = 0x0001
    # (smallest subnormal), 0.333251953125 = 0x3555
    data = bytes.fromhex("003c" "00c0" "0038" "ff7b" "0100" "5535")
    packed = pb.PackedEmbeddings(indices=[0, 1], tokens=[2, 2], dimensions=3, type=pb.EMBEDDING_TYPE_FLOAT16,
                                 data=data)
    first, second = decode_packed(packed)
    assert first.typecode == "f"
    assert list(first) == [1.0, -2.0, 0.5]
    assert list(second) == [65504.0, 2.0 ** -24, 0.333251953125]


def test_int8_with_scales():
    data = bytes([0x7F, 0x81, 0x00, 0x40, 0x01, 0xFF, 0x80, 0x00])  # 127 -127 0 64 | 1 -1 -128 0
    packed = pb.PackedEmbeddings(indices=[0, 1], tokens=[1, 1], dimensions=4, type=pb.EMBEDDING_TYPE_INT8,
                                 data=data, scales=[0.5, 0.25])
    first, second = decode_packed(packed)
    assert first.typecode == "b" and list(first) == [127, -127, 0, 64]
    assert list(second) == [1, -1, -128, 0]
    assert list(dequantize(first, 0.5)) == [63.5, -63.5, 0.0, 32.0]
    got = Embeddings.from_responses([pb.EmbedResponse(packed=packed)])
    assert got.scales == [0.5, 0.25]
    assert [list(v) for v in got.floats()] == [[63.5, -63.5, 0.0, 32.0], [0.25, -0.25, -32.0, 0.0]]
    with pytest.raises(ValueError, match="scales"):
        decode_packed(pb.PackedEmbeddings(indices=[0, 1], dimensions=4, type=pb.EMBEDDING_TYPE_INT8, data=data))


def test_ubinary_with_dimensions_not_a_multiple_of_eight():
    # 10 bits a vector in 2 bytes, the first value in the most significant bit, unused low bits zero
    data = bytes([0b10110000, 0b01000000, 0b01111111, 0b11000000])
    packed = pb.PackedEmbeddings(indices=[0, 1], tokens=[3, 3], dimensions=10, type=pb.EMBEDDING_TYPE_UBINARY,
                                 data=data)
    first, second = decode_packed(packed)
    assert (first, second) == (data[:2], data[2:])
    assert unpack_bits(first, 10) == [1, 0, 1, 1, 0, 0, 0, 0, 0, 1]
    assert unpack_bits(second, 10) == [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    assert hamming(first, second) == 7 and hamming(first, first) == 0
    got = Embeddings.from_responses([pb.EmbedResponse(packed=packed)])
    assert got.dimensions == 10 and [list(v) for v in got.floats()] == [
        [1, 0, 1, 1, 0, 0, 0, 0, 0, 1], [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]]
    with pytest.raises(ValueError, match="bytes of data"):
        decode_packed(pb.PackedEmbeddings(indices=[0, 1], dimensions=10, type=pb.EMBEDDING_TYPE_UBINARY,
                                          data=data[:3]))


def test_messages_gathered_in_input_order():
    one = bytes.fromhex("0000803f")  # 1.0
    two = bytes.fromhex("00000040")  # 2.0
    three = bytes.fromhex("00004040")  # 3.0
    responses = [_response(indices=[2, 0], tokens=[7, 5], dimensions=1, type=pb.EMBEDDING_TYPE_FLOAT32,
                           data=three + one),
                 _response(indices=[1], tokens=[6], dimensions=1, type=pb.EMBEDDING_TYPE_FLOAT32, data=two)]
    got = Embeddings.from_responses(responses, 3)
    assert [list(v) for v in got] == [[1.0], [2.0], [3.0]] and len(got) == 3 and list(got[1]) == [2.0]
    assert (got.type, got.dimensions, got.tokens, got.scales, got.messages) == (
        pb.EMBEDDING_TYPE_FLOAT32, 1, [5, 6, 7], [], 2)
    with pytest.raises(ValueError, match="no vector for inputs \\[3\\]"):
        Embeddings.from_responses(responses, 4)
    with pytest.raises(ValueError, match="repeated"):
        Embeddings.from_responses(responses + responses[1:], 3)
    with pytest.raises(ValueError, match="not packed"):
        Embeddings.from_responses([pb.EmbedResponse(index=0, embedding=[1.0])], 1)
    mixed = _response(indices=[1], dimensions=1, type=pb.EMBEDDING_TYPE_INT8, data=b"\x01", scales=[1.0])
    with pytest.raises(ValueError, match="after"):
        Embeddings.from_responses([responses[0], mixed], 3)


def test_numpy_is_optional():
    data = bytes([0x7F, 0x81, 0x00, 0x40])
    got = Embeddings.from_responses([_response(indices=[0], dimensions=4, type=pb.EMBEDDING_TYPE_INT8, data=data,
                                               scales=[0.5])])
    bits = Embeddings.from_responses([_response(indices=[0], dimensions=10, type=pb.EMBEDDING_TYPE_UBINARY,
                                                data=bytes([0b10110000, 0b01000000]))])
    try:
        import numpy as np
    except ImportError:
        with pytest.raises(ImportError):
            got.numpy()
        return
    values = got.numpy()
    assert values.dtype == np.int8 and values.tolist() == [[127, -127, 0, 64]]
    assert (values * np.asarray(got.scales)[:, None]).tolist() == [[63.5, -63.5, 0.0, 32.0]]
    packed = bits.numpy()
    assert packed.dtype == np.uint8 and packed.shape == (1, 2)
    assert np.unpackbits(packed, axis=-1, count=10).tolist() == [[1, 0, 1, 1, 0, 0, 0, 0, 0, 1]]
