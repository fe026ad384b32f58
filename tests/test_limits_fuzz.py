"""Every size limit, fuzzed around its edge (hypothesis): a request at most at the
limit is never refused for that size; one past it is refused with INVALID_ARGUMENT
and a BadRequest violation naming the field, before any work.

A server of its own with small limits (so sizes near each edge are cheap), over the
llama and qwen3 fixture models, called through a blocking channel on a worker
thread while the session's event loop serves.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Callable

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.embedding.engine import EmbeddingEngine
from engine.generation.core.scheduling.scheduler import SchedulerConfig
from engine.generation.frontend.engine import GenerationConfig, GenerationEngine
from engine.models import ModelSet
from engine.validation import Limits
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.server import ServerOptions, create_server
from tests.helpers import details

EXAMPLES = int(os.environ.get("MLXGRPC_FUZZ_EXAMPLES", "300"))
CONTEXT = 4096
LIMITS = Limits(max_tokens=12, max_prompt_tokens=40, max_prompt_bytes=160, max_chat_messages=5,
                max_stop_strings=4, max_stop_length=10, max_logit_bias=6, max_stop_token_ids=5,
                max_request_id_length=12, max_embed_inputs=3, max_embed_input_bytes=60)
CHARS = ["a", " ", "é", "€", "😀"]  # 1 to 4 bytes of UTF-8


@dataclass(frozen=True)
class Edge:
    """One limit: the method, the field a violation names, the limit, and a request
    whose measured size is ``n``."""

    method: str
    field: str
    limit: int
    build: Callable


def _gen(**kw) -> pb.GenerateRequest:
    if not {"text", "tokens", "chat"} & kw.keys():
        kw["text"] = "Hello"
    return pb.GenerateRequest(model="tiny", stopping=kw.pop("stopping", gen_pb.StoppingCriteria(max_tokens=1)), **kw)


def _stopping(**kw) -> gen_pb.StoppingCriteria:
    return gen_pb.StoppingCriteria(**{"max_tokens": 1, **kw})


def _chat(texts: list[str]) -> gen_pb.ChatMessages:
    return gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", content=t) for t in texts])


EDGES = [
    Edge("Generate", "text", 160, lambda n, text: _gen(text=text(n))),
    Edge("Generate", "chat.messages", 5, lambda n, text: _gen(chat=_chat(["hi"] * n))),
    # two messages of role "user" (8 bytes) and contents of n - 8 bytes in all
    Edge("Generate", "chat.messages", 160, lambda n, text: _gen(chat=_chat(["", text(max(n - 8, 0))]))),
    Edge("Generate", "tokens.ids", 40, lambda n, text: _gen(tokens=gen_pb.TokenIds(ids=[7] * n))),
    Edge("Generate", "stopping.stop", 4, lambda n, text: _gen(stopping=_stopping(stop=["zz"] * n))),
    Edge("Generate", "stopping.stop", 10, lambda n, text: _gen(stopping=_stopping(stop=["z" * max(n, 1)]))),
    Edge("Generate", "stopping.stop_token_ids", 5, lambda n, text: _gen(stopping=_stopping(stop_token_ids=[3] * n))),
    Edge("Generate", "sampling.logit_bias", 6,
         lambda n, text: _gen(sampling=gen_pb.SamplingParams(logit_bias={i: 0.5 for i in range(n)}))),
    Edge("Generate", "stopping.max_tokens", 12, lambda n, text: _gen(stopping=gen_pb.StoppingCriteria(max_tokens=max(n, 1)))),
    Edge("Generate", "stopping.min_tokens", 12, lambda n, text: _gen(stopping=gen_pb.StoppingCriteria(min_tokens=n))),
    Edge("Generate", "request_id", 12, lambda n, text: _gen(request_id="r" * n)),
    Edge("Generate", "session_id", 12, lambda n, text: _gen(session_id="s" * n)),
    Edge("Generate", "model", 12, lambda n, text: pb.GenerateRequest(model="m" * n, text="Hi")),
    Edge("Embed", "inputs", 3, lambda n, text: pb.EmbedRequest(model="tiny-embed", inputs=["x"] * n)),
    Edge("Embed", "inputs[0]", 60, lambda n, text: pb.EmbedRequest(model="tiny-embed", inputs=[text(n)])),
    Edge("Embed", "instruction", 60,
         lambda n, text: pb.EmbedRequest(model="tiny-embed", inputs=["x"], instruction=text(n))),
    Edge("Tokenize", "text", 160, lambda n, text: pb.TokenizeRequest(model="tiny", text=text(n))),
    Edge("Detokenize", "token_ids", CONTEXT, lambda n, text: pb.DetokenizeRequest(model="tiny", token_ids=[5] * n)),
    Edge("Cancel", "request_id", 12, lambda n, text: pb.CancelRequest(request_id="c" * max(n, 1))),
]
_SIZE_WORDS = ("at most", "must be between")


@pytest.fixture(scope="module")
async def tiny_server(fixture_models):
    config = GenerationConfig(limits=LIMITS, scheduler=SchedulerConfig(max_active=4, max_queued=8, prefill_chunk=16))
    models = ModelSet([GenerationEngine(str(fixture_models["llama"]), name="tiny", config=config)],
                      [EmbeddingEngine(fixture_models["qwen3"], name="tiny-embed", limits=LIMITS)])
    await models.start()
    srv, port = await create_server("127.0.0.1:0", models, options=ServerOptions(limits=LIMITS))
    await srv.start()
    yield f"127.0.0.1:{port}"
    await srv.stop(0.5)
    await models.close()


@st.composite
def texts_of(draw, n: int) -> str:
    """A text of exactly ``n`` UTF-8 bytes, of characters 1 to 4 bytes long."""
    out, left = [], n
    while left:
        char = draw(st.sampled_from([c for c in CHARS if len(c.encode()) <= left]))
        out.append(char)
        left -= len(char.encode())
    return "".join(out)


@st.composite
def cases(draw) -> tuple[Edge, int, object]:
    edge = draw(st.sampled_from(EDGES))
    near = st.integers(max(edge.limit - 3, 0), edge.limit + 3)
    n = draw(st.one_of(near, near, st.integers(0, 4 * edge.limit)))
    return edge, n, edge.build(n, lambda k: draw(texts_of(k)))


def _outcome(stub, method: str, request) -> tuple[grpc.StatusCode, str, str]:
    """(code, violated field, its description) of one call."""
    try:
        if method in ("Generate", "Embed"):
            for _ in getattr(stub, method)(request, timeout=120):
                pass
        else:
            getattr(stub, method)(request, timeout=120)
        return grpc.StatusCode.OK, "", ""
    except grpc.RpcError as err:
        violations = details(err).get("BadRequest")
        first = violations.field_violations[0] if violations else None
        return err.code(), first.field if first else "", first.description if first else ""


def _check(stub, edge: Edge, n: int, request) -> bool:
    code, field, description = _outcome(stub, edge.method, request)
    size_refusal = code == grpc.StatusCode.INVALID_ARGUMENT and field == edge.field and \
        any(word in description for word in _SIZE_WORDS)
    over = n > edge.limit
    assert size_refusal == over, (edge.method, edge.field, n, code, field, description)
    assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), description
    return over


def _run(address: str, seen: dict[tuple[str, bool], int]) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)

        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(cases())
        def fuzz(case):
            edge, n, request = case
            over = _check(stub, edge, n, request)
            seen[(edge.field, over)] = seen.get((edge.field, over), 0) + 1

        fuzz()


async def test_every_limit_holds_at_its_edge(tiny_server):
    seen: dict[tuple[str, bool], int] = {}
    await asyncio.to_thread(_run, tiny_server, seen)
    print(f"limit edges over {sum(seen.values())} calls: {dict(sorted(seen.items()))}")
    assert sum(seen.values()) >= EXAMPLES
    assert {over for _, over in seen} == {True, False}

