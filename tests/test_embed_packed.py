"""Packed Embed responses: many vectors a message (256 inputs in at most 4), in float32
equal to the per-input vectors, float16, int8 and ubinary as their definitions say, the
dimensions applied before the conversion; bad combinations refused by name."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from engine.embedding.packing import EmbeddingType, pack, unpack
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.conftest import HAS_MINILM, MINILM
from tests.helpers import details

needs_minilm = pytest.mark.skipif(not HAS_MINILM, reason="needs the embedded MiniLM")
TYPES = {pb.EMBEDDING_TYPE_FLOAT32: EmbeddingType.FLOAT32, pb.EMBEDDING_TYPE_FLOAT16: EmbeddingType.FLOAT16,
         pb.EMBEDDING_TYPE_INT8: EmbeddingType.INT8, pb.EMBEDDING_TYPE_UBINARY: EmbeddingType.UBINARY}
INPUTS = [f"note {i}: the {'ferry' if i % 3 else 'lighthouse'} leaves at {i % 12} o'clock" for i in range(256)]


def test_each_type_packs_as_defined():
    rng = np.random.default_rng(0)
    block = rng.standard_normal((5, 13)).astype(np.float32)
    for kind, tol in ((EmbeddingType.FLOAT32, 0), (EmbeddingType.FLOAT16, 1e-3)):
        back = unpack(pack(list(block), kind).data, 5, 13, kind)
        assert np.allclose(back, block, atol=tol * np.abs(block).max(), rtol=tol)
    p = pack(list(block), EmbeddingType.INT8)
    assert len(p.data) == 5 * 13 and len(p.scales) == 5
    raw = np.frombuffer(p.data, np.int8).reshape(5, 13)
    assert (np.abs(raw).max(axis=1) == 127).all()  # each vector's largest magnitude maps to 127
    assert np.abs(unpack(p.data, 5, 13, EmbeddingType.INT8, p.scales) - block).max() <= max(p.scales) / 2 + 1e-6
    bits = pack(list(block), EmbeddingType.UBINARY).data
    assert len(bits) == 5 * 2  # 13 bits in 2 bytes, the last byte's low bits zero
    assert (unpack(bits, 5, 13, EmbeddingType.UBINARY) == (block > 0)).all()
    assert bits[0] >> 7 == int(block[0, 0] > 0)  # the first value in the most significant bit


async def collect(stub, inputs, **kw) -> list[pb.EmbedResponse]:
    return [reply async for reply in stub.Embed(pb.EmbedRequest(model=MINILM, inputs=inputs, **kw))]


def vectors_of(replies: list[pb.EmbedResponse]) -> tuple[dict[int, np.ndarray], dict[int, int]]:
    vectors, tokens = {}, {}
    for r in replies:
        p = r.packed
        block = unpack(p.data, len(p.indices), p.dimensions, TYPES[p.type], p.scales)
        for i, index in enumerate(p.indices):
            assert index not in vectors
            vectors[index], tokens[index] = block[i], p.tokens[i]
    return vectors, tokens


@needs_minilm
@pytest.mark.parametrize("dimensions", [0, 64])
async def test_packed_vectors_equal_the_per_input_ones(stub, dimensions):
    plain = {r.index: r for r in await collect(stub, INPUTS, dimensions=dimensions)}
    replies = await collect(stub, INPUTS, packed=True, dimensions=dimensions)
    assert len(replies) <= 4 and all(not r.embedding and r.HasField("packed") for r in replies)
    vectors, tokens = vectors_of(replies)
    assert sorted(vectors) == list(range(len(INPUTS)))
    for i, r in plain.items():
        assert np.array_equal(vectors[i], np.array(r.embedding, np.float32)) and tokens[i] == r.tokens


@needs_minilm
async def test_smaller_types_stay_close_to_float32(stub):
    exact, _ = vectors_of(await collect(stub, INPUTS[:64], packed=True, dimensions=128))
    want = np.stack([exact[i] for i in range(64)])
    for kind, floor in ((pb.EMBEDDING_TYPE_FLOAT16, 0.99999), (pb.EMBEDDING_TYPE_INT8, 0.999)):
        got, _ = vectors_of(await collect(stub, INPUTS[:64], packed=True, dimensions=128, embedding_type=kind))
        got = np.stack([got[i] for i in range(64)])
        cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        assert cos.min() >= floor, (kind, cos.min())
    bits, _ = vectors_of(await collect(stub, INPUTS[:64], packed=True, dimensions=128,
                                       embedding_type=pb.EMBEDDING_TYPE_UBINARY))
    assert all(np.array_equal(bits[i], exact[i] > 0) for i in range(64))


@needs_minilm
@pytest.mark.parametrize("kw,field", [
    ({"embedding_type": pb.EMBEDDING_TYPE_INT8}, "embedding_type"),
    ({"packed": True, "embedding_type": 99}, "embedding_type"),
])
async def test_bad_layouts_are_refused_by_name(stub, kw, field):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(stub, INPUTS[:2], **kw)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details(err.value)["BadRequest"].field_violations] == [field]
