"""Tenants end to end: a server with a tokens file, called through the generated stubs
with each tenant's bearer token. One tenant never learns another's prompts from
``cached_tokens``, never cancels its requests, and sees only its own load figures;
tenants of one operator-shared namespace do share hits; a tenant's own limit
refuses only that tenant.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
import pytest_asyncio

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.server import ServerOptions, create_server
from service.bearer_tokens import load_table
from tests.helpers import details, generate, request

TOKENS = """\
tok-alpha   alpha   inference
tok-beta    beta    inference
tok-gamma   gamma   inference  cache_namespace=team
tok-delta   delta   inference  cache_namespace=team
tok-capped  capped  inference  max_in_flight=1
tok-ops     ops     admin
"""
# Several chunks of the session server's llama fixture (prefill_chunk 8), so a
# repeat is served from the prefix cache.
LONG = 3000  # tokens: far more than the test waits for; such a request ends by Cancel
SECRET = ("The quarterly numbers of the northern harbour office, kept under lock: "
          "eleven boats, four cranes and a ledger nobody reads.")


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def until_in_flight(stub, token: str) -> None:
    """Polls the caller's own load figures until one of its requests is in flight."""
    for _ in range(1000):
        load = await stub.GetLoad(pb.GetLoadRequest(model="llama"), metadata=bearer(token))
        if any(t.in_flight_requests for t in load.models[0].tenants):
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the request never got in flight")


@pytest_asyncio.fixture
async def stub(server, tmp_path):
    path = tmp_path / "tokens"
    path.write_text(TOKENS)
    options = ServerOptions(auth_table=load_table(path, {}))
    srv, port = await create_server("127.0.0.1:0", server["models"], options=options)
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pb_grpc.InferenceServiceStub(channel)
    finally:
        await srv.stop(0.5)


async def cached(stub, token: str, prompt: str) -> int:
    out = await generate(stub, request(prompt, max_tokens=2), metadata=bearer(token))
    return out.started.cached_tokens


async def test_a_tenant_never_sees_another_tenants_prefix(stub):
    prompt = "Alpha's note. " + SECRET
    assert await cached(stub, "tok-alpha", prompt) == 0
    assert await cached(stub, "tok-alpha", prompt) > 0  # alpha's own repeat hits
    assert await cached(stub, "tok-beta", prompt) == 0
    assert await cached(stub, "tok-capped", prompt + " And a little more.") == 0  # a longer probe


async def test_tenants_sharing_a_namespace_share_hits(stub):
    prompt = "The team's note. " + SECRET
    assert await cached(stub, "tok-gamma", prompt) == 0
    assert await cached(stub, "tok-delta", prompt) > 0
    assert await cached(stub, "tok-alpha", prompt) == 0


async def test_cancel_reaches_only_the_callers_own_requests(stub):
    req = request("Keep counting the boats", max_tokens=300, request_id="shared-id")
    req.stopping.ignore_eos = True
    alpha = asyncio.create_task(generate(stub, req, metadata=bearer("tok-alpha")))
    await until_in_flight(stub, "tok-alpha")
    refused = await stub.Cancel(pb.CancelRequest(request_id="shared-id"), metadata=bearer("tok-beta"))
    assert not refused.cancelled
    out = await alpha
    assert out.finished.reason == gen_pb.FINISH_REASON_LENGTH and len(out.token_ids) == 300
    again = request("Keep counting the boats", max_tokens=LONG, request_id="shared-id")
    again.stopping.ignore_eos = True
    alpha = asyncio.create_task(generate(stub, again, metadata=bearer("tok-alpha")))
    for _ in range(500):
        if (await stub.Cancel(pb.CancelRequest(request_id="shared-id"), metadata=bearer("tok-alpha"))).cancelled:
            break
        await asyncio.sleep(0.01)
    out = await alpha
    assert out.finished.reason == gen_pb.FINISH_REASON_CANCELLED


async def test_load_figures_show_a_tenant_only_itself(stub):
    await generate(stub, request("Hello", max_tokens=2), metadata=bearer("tok-alpha"))
    await generate(stub, request("Hello", max_tokens=2), metadata=bearer("tok-beta"))
    own = await stub.GetLoad(pb.GetLoadRequest(model="llama"), metadata=bearer("tok-alpha"))
    assert [t.tenant for t in own.models[0].tenants] == ["alpha"]
    assert own.models[0].tenants[0].generated_tokens >= 2
    everyone = await stub.GetLoad(pb.GetLoadRequest(model="llama"), metadata=bearer("tok-ops"))
    assert {"alpha", "beta"} <= {t.tenant for t in everyone.models[0].tenants}


async def test_a_tenants_limit_refuses_only_that_tenant(stub):
    long = request("Keep counting the boats", max_tokens=LONG, request_id="capped-long")
    long.stopping.ignore_eos = True
    first = asyncio.create_task(generate(stub, long, metadata=bearer("tok-capped")))
    await until_in_flight(stub, "tok-capped")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await generate(stub, request("Hello", max_tokens=2), metadata=bearer("tok-capped"))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    info = details(refused.value)
    assert info["ErrorInfo"].reason == "TENANT_LIMIT" and "RetryInfo" in info
    other = await generate(stub, request("Hello", max_tokens=2), metadata=bearer("tok-beta"))
    assert other.finished.reason == gen_pb.FINISH_REASON_LENGTH
    assert (await stub.Cancel(pb.CancelRequest(request_id="capped-long"), metadata=bearer("tok-capped"))).cancelled
    assert (await first).finished.reason == gen_pb.FINISH_REASON_CANCELLED
    load = await stub.GetLoad(pb.GetLoadRequest(model="llama"), metadata=bearer("tok-capped"))
    assert load.models[0].tenants[0].refused_requests >= 1


async def test_adapter_calls_need_the_admin_role(stub):
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await stub.UnloadAdapter(pb.UnloadAdapterRequest(model="llama", name="anything"),
                                 metadata=bearer("tok-alpha"))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert details(denied.value)["ErrorInfo"].reason == "ADMIN_ROLE_REQUIRED"
    with pytest.raises(grpc.aio.AioRpcError) as missing:  # an admin passes the gate: the name is unknown
        await stub.UnloadAdapter(pb.UnloadAdapterRequest(model="llama", name="anything"),
                                 metadata=bearer("tok-ops"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
