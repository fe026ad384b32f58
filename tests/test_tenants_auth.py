"""Tenants and roles: the tokens file, the caller's identity on every RPC (each
handler shape), the admin role on adapter RPCs, file paths only for admins, the
tenant in the access log, and the refusal to listen beyond loopback without tokens."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest

from engine.models import ModelSet
from service import cli
from service.access_log import access_fields
from service.auth import is_loopback_host, is_loopback_peer
from service.calls import CallRecord
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.identity import current_identity
from service.metrics import Metrics
from service.server import ServerOptions, create_server, serve
from service.bearer_tokens import load_table
from tests.helpers import details, generate, request
from tests.test_ops_security import bearer

TOKENS_FILE = """\
# tenant acme: one admin token, one for its apps
acme-admin   acme   admin   weight=2 max_in_flight=4
acme-app     acme   inference cache_namespace=shared
beta-app     beta   inference tokens_per_minute=600 max_queued=3 cache_namespace=shared
bare-token
"""


class Recorder(Metrics):
    """The server's metrics, also keeping every finished call's record."""

    def __init__(self, models):
        super().__init__(models)
        self.calls: list[CallRecord] = []

    def on_end(self, call: CallRecord) -> None:
        super().on_end(call)
        self.calls.append(call)


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(TOKENS_FILE)
    return load_table(path, {"MLXGRPC_AUTH_TOKENS": "env-token"})


@contextlib.asynccontextmanager
async def tenant_server(models, options=ServerOptions(), address="127.0.0.1:0", state=None):
    recorder = Recorder(models)
    srv, port = await create_server(address, models, options=options, metrics=recorder, state=state)
    await srv.start()
    host = address.rpartition(":")[0]
    try:
        async with grpc.aio.insecure_channel(f"{host}:{port}") as ch:
            yield ch, recorder, recorder
    finally:
        await srv.stop(0.5)


# --- the tokens file --------------------------------------------------------------


def test_the_tokens_file_names_tenants_roles_and_settings(table):
    admin, app, beta = (table.identify(t) for t in ("acme-admin", "acme-app", "beta-app"))
    assert admin.admin and not app.admin and not beta.admin
    assert admin.tenant is app.tenant  # one tenant, its settings gathered from every line
    acme = admin.tenant
    assert (acme.name, acme.weight, acme.max_in_flight, acme.cache_namespace) == ("acme", 2.0, 4, "shared")
    assert (beta.tenant.tokens_per_minute, beta.tenant.max_queued, beta.tenant.weight) == (600, 3, 1.0)
    assert acme.namespace == beta.tenant.namespace == "shared"
    for bare in ("bare-token", "env-token"):  # old format and the environment: default, inference only
        who = table.identify(bare)
        assert who.tenant.name == "default" and not who.admin and who.tenant.weight == 1.0
    assert table.identify("acme-admin ") is None and table.identify("acme") is None
    assert set(table.tenants()) == {"acme", "beta", "default"}


@pytest.mark.parametrize("text, message", [
    ("t1 acme inference weight=2\nt2 acme admin weight=3\n", r"tokens:2: tenant 'acme' already has weight=2"),
    ("t1 a admin\nt1 a inference\n", r"tokens:2: this token is also on .*tokens:1"),
    ("t1 bad/name\n", r"tokens:1: tenant 'bad/name' is not a name"),
    ("t1 " + "x" * 65 + "\n", r"tokens:1: tenant .* is not a name"),
    ("t1 a root\n", r"tokens:1: role 'root' is none of inference, router, admin"),
    ("t1 a weight=2\n", r"tokens:1: settings come after TOKEN TENANT ROLE"),
    ("t1 a admin weight=0\n", r"weight must be a number > 0"),
    ("t1 a admin weight=nan\n", r"weight must be a number > 0"),
    ("t1 a admin weight=-1\n", r"weight must be a number > 0"),
    ("t1 a admin max_queued=-1\n", r"max_queued must be an integer >= 0"),
    ("t1 a admin max_in_flight=1.5\n", r"max_in_flight must be an integer >= 0"),
    ("t1 a admin cache_namespace=a:b\n", r"cache_namespace 'a:b' is not a name"),
    ("t1 a admin colour=red\n", r"unknown setting 'colour'"),
    ("t1 a admin weight=1 weight=1\n", r"weight is given twice"),
    ("t1 a admin extra\n", r"expected key=value"),
    ("# only comments\n\n", r"holds no token"),
])
def test_mistakes_in_the_tokens_file_name_their_line(tmp_path, text, message):
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_table(path, {})


def test_repeating_a_tenant_or_token_without_conflict_is_fine(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("t1 a admin weight=2\nt2 a inference\nt3 a inference weight=2.0\nt1 a admin\n")
    table = load_table(path, {})
    assert len(table) == 3 and {table.identify(t).tenant.weight for t in ("t1", "t2", "t3")} == {2.0}
    with pytest.raises(ValueError, match="whitespace"):
        load_table(None, {"MLXGRPC_AUTH_TOKENS": "a\tb"})


def test_peers_and_hosts_on_this_machine():
    for peer in ("ipv4:127.0.0.1:5000", "ipv4:127.8.9.10:1", "ipv6:[::1]:5000", "ipv6:%5B::1%5D:5000",
                 "ipv6:[::ffff:127.0.0.1]:80", "unix:/tmp/mlx.sock", "unix-abstract:mlx"):
        assert is_loopback_peer(peer), peer
    for peer in ("ipv4:10.0.0.5:5000", "ipv4:0.0.0.0:1", "ipv6:[2001:db8::1]:5000", "ipv6:[::]:1",
                 "ipv6:[::ffff:10.0.0.1]:80", "ipv4:127.0.0.1", "", "garbage", "ipv4:localhost:1"):
        assert not is_loopback_peer(peer), peer
    for host in ("127.0.0.1", "localhost", "[::1]", "::1", "127.1.2.3"):
        assert is_loopback_host(host), host
    for host in ("0.0.0.0", "[::]", "::", "10.1.2.3", "example.org", ""):
        assert not is_loopback_host(host), host


# --- the command line -------------------------------------------------------------


def test_the_cli_refuses_to_listen_beyond_loopback_without_tokens(tmp_path, capsys):
    parser = cli.build_parser()
    assert parser.parse_args(["serve"]).host == "127.0.0.1"
    assert not cli.server_options(parser.parse_args(["serve"]), parser).insecure_open
    for host in ("0.0.0.0", "[::]", "192.0.2.7"):
        with pytest.raises(SystemExit) as exit_:
            cli.server_options(parser.parse_args(["serve", "--host", host]), parser)
        assert exit_.value.code == 2
        assert "without auth tokens" in capsys.readouterr().err
    assert cli.server_options(parser.parse_args(["serve", "--host", "0.0.0.0", "--insecure-open"]),
                              parser).insecure_open
    tokens = tmp_path / "tokens"
    tokens.write_text("t1 ops admin\n")
    options = cli.server_options(parser.parse_args(["serve", "--host", "[::]", "--auth-token-file", str(tokens)]),
                                 parser)
    assert options.auth_table.identify("t1").admin
    assert cli.server_options(parser.parse_args(["serve"]), parser).max_concurrent_rpcs == 1024
    assert cli.server_options(parser.parse_args(["serve", "--max-concurrent-rpcs", "0"]),
                              parser).max_concurrent_rpcs == 0
    with pytest.raises(SystemExit):
        cli.server_options(parser.parse_args(["serve", "--max-concurrent-rpcs", "-1"]), parser)


async def test_serve_refuses_a_non_loopback_address_without_tokens_before_binding(caplog):
    # a documentation address (TEST-NET-1) no interface has: were the check gone, binding would fail
    with pytest.raises(ValueError, match="--insecure-open"):
        await serve("192.0.2.1:0", ModelSet([], []), ServerOptions())
    with caplog.at_level("WARNING", logger="service.server"), pytest.raises(RuntimeError, match="bind"):
        await serve("192.0.2.1:0", ModelSet([], []), ServerOptions(insecure_open=True))
    assert "INSECURE (--insecure-open)" in caplog.text


# --- identity and the admin role on a live server ---------------------------------


async def test_inference_tokens_may_not_touch_adapters(server, table, fixture_adapters):
    options = ServerOptions(auth_table=table)
    async with tenant_server(server["models"], options) as (ch, recorder, _):
        stub = pb_grpc.InferenceServiceStub(ch)
        path = str(fixture_adapters["small"])
        for token in ("acme-app", "beta-app", "bare-token", "env-token"):
            for call in (stub.LoadAdapter(pb.LoadAdapterRequest(model="llama", name="t", path=path),
                                          metadata=bearer(token)),
                         stub.UnloadAdapter(pb.UnloadAdapterRequest(model="llama", name="t"), metadata=bearer(token))):
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await call
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
                info = details(err.value)["ErrorInfo"]
                assert (info.reason, info.domain) == ("ADMIN_ROLE_REQUIRED", "mlxgrpc.v1")
        # refused before the request is parsed: bad bytes get the same answer
        raw = ch.unary_unary("/mlxgrpc.v1.InferenceService/LoadAdapter", request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await raw(b"\xff\xff\xff", metadata=bearer("acme-app"))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # inference still works for them, and the admin token manages adapters
        out = await generate(stub, request("Hello", max_tokens=2), metadata=bearer("beta-app"))
        assert len(out.token_ids) == 2
        loaded = await stub.LoadAdapter(pb.LoadAdapterRequest(model="llama", name="t", path=path),
                                        metadata=bearer("acme-admin"))
        assert loaded.adapter.name == "t" and loaded.adapter.source and path.endswith(loaded.adapter.source)  # relative to the root
        seen = await stub.ListAdapters(pb.ListAdaptersRequest(model="llama"), metadata=bearer("acme-app"))
        assert [(a.name, a.source) for a in seen.adapters] == [("t", "")]  # paths only for admins
        await stub.UnloadAdapter(pb.UnloadAdapterRequest(model="llama", name="t"), metadata=bearer("acme-admin"))
        await asyncio.sleep(0.05)
    tenants = {(c.method.rpartition("/")[2], c.tenant, c.code) for c in recorder.calls}
    assert ("LoadAdapter", "acme", "PERMISSION_DENIED") in tenants
    assert ("LoadAdapter", "acme", "OK") in tenants and ("Generate", "beta", "OK") in tenants
    assert ("LoadAdapter", "default", "PERMISSION_DENIED") in tenants


async def test_model_paths_go_only_to_admins(server, table):
    async with tenant_server(server["models"], ServerOptions(auth_table=table)) as (ch, _, _):
        stub = pb_grpc.InferenceServiceStub(ch)
        for token, admin in (("acme-admin", True), ("acme-app", False)):
            models = (await stub.ListModels(pb.ListModelsRequest(), metadata=bearer(token))).models
            assert models and all(bool(m.source) == admin for m in models)
            info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"), metadata=bearer(token))).info
            assert bool(info.source) == admin and info.name == "llama"


async def test_with_admin_loopback_local_callers_are_anonymous_admins(server, fixture_adapters):
    async with tenant_server(server["models"], ServerOptions(admin_loopback=True)) as (ch, recorder, _):
        stub = pb_grpc.InferenceServiceStub(ch)
        path = str(fixture_adapters["small"])
        loaded = await stub.LoadAdapter(pb.LoadAdapterRequest(model="llama", name="local", path=path))
        assert loaded.adapter.source and path.endswith(loaded.adapter.source)  # relative to the root
        listed = await stub.ListAdapters(pb.ListAdaptersRequest(model="llama"))
        assert [(a.name, path.endswith(a.source) and bool(a.source)) for a in listed.adapters] == [("local", True)]
        await stub.UnloadAdapter(pb.UnloadAdapterRequest(model="llama", name="local"))
        assert all(m.source for m in (await stub.ListModels(pb.ListModelsRequest())).models)
        # the role is checked before parsing, and bad bytes still get INVALID_ARGUMENT
        raw = ch.unary_unary("/mlxgrpc.v1.InferenceService/UnloadAdapter", request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await raw(b"\xff\xff\xff")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert details(err.value)["ErrorInfo"].reason == "MALFORMED_REQUEST"
        await asyncio.sleep(0.05)
    assert recorder.calls and all(c.tenant == "" and is_loopback_peer(c.peer) for c in recorder.calls)
    unloads = [c for c in recorder.calls if c.method.endswith("/UnloadAdapter") and c.code == "OK"]
    assert unloads[0].model == "llama"  # parsed after the check, and still on the record
    assert access_fields(unloads[0])["tenant"] == ""


async def test_ipv6_loopback_peers_are_local_too(server):
    try:
        async with tenant_server(server["models"], ServerOptions(admin_loopback=True),
                                 address="[::1]:0") as (ch, recorder, _):
            with pytest.raises(grpc.aio.AioRpcError) as err:  # past the role check: no such adapter
                await pb_grpc.InferenceServiceStub(ch).UnloadAdapter(pb.UnloadAdapterRequest(model="llama", name="no"))
    except RuntimeError:  # could not bind
        pytest.skip("no IPv6 loopback here")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert any(c.peer.startswith("ipv6:") for c in recorder.calls)


async def test_the_access_log_names_the_tenant(server, table):
    async with tenant_server(server["models"], ServerOptions(auth_table=table)) as (ch, recorder, _):
        stub = pb_grpc.InferenceServiceStub(ch)
        await stub.ListModels(pb.ListModelsRequest(), metadata=bearer("beta-app"))
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.ListModels(pb.ListModelsRequest(), metadata=bearer("nobody"))
        await asyncio.sleep(0.05)
    fields = [access_fields(c) for c in recorder.calls if c.method.endswith("/ListModels")]
    assert [(f["tenant"], f["code"]) for f in fields] == [("beta", "OK"), ("", "UNAUTHENTICATED")]


async def test_every_handler_shape_runs_with_the_callers_identity(table):
    """A method of each streaming shape, on a real server behind the real interceptors,
    answers with the identity its handler sees."""
    def seen() -> bytes:
        who = current_identity()
        return f"{who.tenant.name}:{who.admin}".encode()

    async def unary(request, context):
        return seen()

    async def server_stream(request, context):
        for _ in range(2):
            await asyncio.sleep(0)
            yield seen()

    async def bidi(requests, context):
        async for _ in requests:
            yield seen()

    handlers = {"Unary": grpc.unary_unary_rpc_method_handler(unary),
                "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
                "Bidi": grpc.stream_stream_rpc_method_handler(bidi)}
    srv, port = await create_server("127.0.0.1:0", ModelSet([], []), options=ServerOptions(auth_table=table))
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Who", handlers),))
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            same = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}
            for token, expected in (("acme-admin", b"acme:True"), ("beta-app", b"beta:False")):
                auth = bearer(token)
                assert await ch.unary_unary("/test.Who/Unary", **same)(b"", metadata=auth) == expected
                assert [r async for r in ch.unary_stream("/test.Who/ServerStream", **same)(b"", metadata=auth)] \
                    == [expected] * 2
                bidi_call = ch.stream_stream("/test.Who/Bidi", **same)(iter([b"", b""]), metadata=auth)
                assert [r async for r in bidi_call] == [expected] * 2
    finally:
        await srv.stop(0.5)
