"""Small helpers for calling the live server through the generated stubs."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb


@dataclass
class Streamed:
    """Everything one Generate stream delivered."""

    started: pb.GenerationStarted | None = None
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    deltas: list[pb.TokenDelta] = field(default_factory=list)
    finished: pb.GenerationFinished | None = None


def request(prompt: str = "Hello", *, model: str = "llama", max_tokens: int = 8, **kw) -> pb.GenerateRequest:
    sampling = kw.pop("sampling", None)
    stopping = kw.pop("stopping", None) or gen_pb.StoppingCriteria(max_tokens=max_tokens)
    return pb.GenerateRequest(model=model, text=prompt, sampling=sampling, stopping=stopping, **kw)


async def generate(stub, req: pb.GenerateRequest, **call_kw) -> Streamed:
    out = Streamed()
    async for msg in stub.Generate(req, **call_kw):
        which = msg.WhichOneof("event")
        if which == "started":
            assert out.started is None and not out.deltas, "started must come first, once"
            out.started = msg.started
        elif which == "delta":
            assert out.finished is None
            out.deltas.append(msg.delta)
            out.token_ids.extend(msg.delta.token_ids)
            out.text += msg.delta.text
        else:
            assert out.finished is None, "finished must come once"
            out.finished = msg.finished
    return out


def details(error: grpc.aio.AioRpcError) -> dict[str, object]:
    """The google.rpc details of a failed call, by type name."""
    status = rpc_status.from_call(error)
    found: dict[str, object] = {}
    for any_msg in status.details if status else ():
        for cls in (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest, error_details_pb2.RetryInfo):
            if any_msg.Is(cls.DESCRIPTOR):
                msg = cls()
                any_msg.Unpack(msg)
                found[cls.DESCRIPTOR.name] = msg
    return found
