"""embed_sparse without a live server: the request it builds, and the call over the wire to
an in-process server that answers EmbedSparse (ids ascending from each input's characters),
refusing once with RetryInfo: the blocking and asyncio clients, retries and priorities."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from mlxgrpc_client import SparseEmbeddings, SparseVector, aio, connect, embed_sparse_request, pb
from mlxgrpc_client.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc


def test_embed_sparse_request():
    req = embed_sparse_request(["Rivers.", "Lakes."], model="splade", top_k=8, truncate="none",
                               request_id="s-1", priority=-5)
    assert (req.model, list(req.inputs), req.top_k) == ("splade", ["Rivers.", "Lakes."], 8)
    assert (req.truncate, req.request_id, req.priority) == (pb.TRUNCATION_NONE, "s-1", -5)
    assert list(embed_sparse_request("one text").inputs) == ["one text"]  # not its characters
    plain = embed_sparse_request(t for t in ("a", "b"))
    assert list(plain.inputs) == ["a", "b"]
    assert (plain.model, plain.top_k, plain.truncate, plain.request_id, plain.priority) == (
        "", 0, pb.TRUNCATION_UNSPECIFIED, "", 0)  # the server's defaults
    with pytest.raises(ValueError, match="truncation"):
        embed_sparse_request("a", truncate="middle")


def test_sparse_vector_helpers():
    a = SparseVector(0, (2, 5, 9), (0.5, 1.0, 2.0), 4)
    b = SparseVector(1, (5, 7, 9), (3.0, 1.0, 0.25), 3)
    assert a.as_dict() == {2: 0.5, 5: 1.0, 9: 2.0}
    assert a.dot(b) == b.dot(a) == 1.0 * 3.0 + 2.0 * 0.25
    reply = pb.EmbedSparseResponse(model="m", embeddings=[
        pb.SparseEmbedding(index=1, token_ids=[5, 7, 9], weights=[3.0, 1.0, 0.25], tokens=3),
        pb.SparseEmbedding(index=0, token_ids=[2, 5, 9], weights=[0.5, 1.0, 2.0], tokens=4)])
    got = SparseEmbeddings.of(reply)
    assert got.model == "m" and list(got) == [a, b] and got[1] == b and len(got) == 2


class _Sparse(pb_grpc.InferenceServiceServicer):
    """Each input's vector: its distinct characters' code points, ascending, each weighing its
    count; refuses ``refusals`` times with RetryInfo."""

    def __init__(self):
        self.requests, self.priorities, self.refusals = [], [], 0

    def EmbedSparse(self, request, context):
        self.requests.append(request)
        self.priorities.append(request.priority)
        if self.refusals > 0:
            self.refusals -= 1
            status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message="refused for now")
            delay = duration_pb2.Duration()
            delay.FromMilliseconds(200)
            status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
            context.abort_with_status(rpc_status.to_status(status))
        out = []
        for i, text in enumerate(request.inputs):
            counts = {ord(c): float(text.count(c)) for c in set(text)}
            kept = sorted(sorted(counts, key=lambda k: (-counts[k], k))[:request.top_k or None])
            out.append(pb.SparseEmbedding(index=i, token_ids=kept, weights=[counts[k] for k in kept],
                                          tokens=len(text) + 2))
        return pb.EmbedSparseResponse(model=request.model or "splade", embeddings=out[::-1])  # any order


@pytest.fixture
def sparse_server():
    servicer = _Sparse()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_InferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(None)


def test_embed_sparse_over_the_wire(sparse_server):
    servicer, address = sparse_server
    servicer.refusals = 1  # refused once with RetryInfo: retried like the other unary calls
    retries = []
    with connect(address, priority=-20, on_retry=lambda d, delay: retries.append(delay)) as client:
        reply = client.embed_sparse(["abca", "b"], truncate="none", request_id="s-1")
        top = client.embed_sparse("abbcc", model="other", top_k=2, priority=7)
    assert isinstance(reply, SparseEmbeddings) and reply.model == "splade"
    assert reply[0] == SparseVector(0, (97, 98, 99), (2.0, 1.0, 1.0), 6)  # input order, whatever the wire's
    assert reply[1] == SparseVector(1, (98,), (1.0,), 3)
    assert top.model == "other" and top[0].token_ids == (98, 99) and top[0].weights == (2.0, 2.0)
    assert retries == [0.2]
    first, again, second = servicer.requests
    assert first == again  # the same request, its id included, for every attempt
    assert (list(first.inputs), first.truncate, first.request_id) == (["abca", "b"], pb.TRUNCATION_NONE, "s-1")
    assert (second.model, second.top_k, list(second.inputs)) == ("other", 2, ["abbcc"])
    assert servicer.priorities == [-20, -20, 7]  # the client's default, unless the request has its own


async def test_embed_sparse_in_asyncio(sparse_server):
    servicer, address = sparse_server
    async with aio.connect(address, priority=3) as client:
        reply = await client.embed_sparse(["aab", "c"], top_k=1, truncate=pb.TRUNCATION_END)
    assert [v.token_ids for v in reply] == [(97,), (99,)]
    (request,) = servicer.requests
    assert (request.top_k, request.truncate, request.priority) == (1, pb.TRUNCATION_END, 3)
