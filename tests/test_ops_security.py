"""Bearer-token auth, TLS and mutual TLS, reflection off, and the CLI's checks.

Servers here are extra in-process servers over the session's already-loaded models
(or over no model at all), so nothing is loaded twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from engine.models import ModelSet
from service import cli
from service.auth import bearer_token
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from service.server import ServerOptions, create_server
from service.bearer_tokens import TokenTable, load_table
from service.tls import server_credentials
from tests.helpers import details, generate, request

TOKENS = ("s3cret-token-1", "other-token-2")


@contextlib.asynccontextmanager
async def extra_server(models: ModelSet, options: ServerOptions = ServerOptions(), credentials=None):
    srv, port = await create_server("127.0.0.1:0", models, options=options, credentials=credentials)
    await srv.start()
    try:
        yield port
    finally:
        await srv.stop(0.5)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


# --- tokens -----------------------------------------------------------------------


def test_tokens_from_file_and_environment(tmp_path):
    """A file of bare tokens (the old format) still parses: each is tenant default,
    role inference."""
    path = tmp_path / "tokens"
    path.write_text("# ops tokens\nalpha\n\n  beta  \nalpha\n")
    table = load_table(path, {})
    assert len(table) == 2 and {table.identify(t).tenant.name for t in ("alpha", "beta")} == {"default"}
    assert not table.identify("alpha").admin
    both = load_table(path, {"MLXGRPC_AUTH_TOKENS": "gamma, beta,,"})
    assert len(both) == 3 and both.identify("gamma") == both.identify("alpha")
    assert not load_table(None, {"MLXGRPC_AUTH_TOKENS": ""})
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n\n")
    with pytest.raises(ValueError, match="holds no token"):
        load_table(empty, {})
    with pytest.raises(ValueError, match="whitespace"):
        load_table(None, {"MLXGRPC_AUTH_TOKENS": "a b"})


def test_bearer_token_parsing_and_comparison():
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("authorization", "bearer   abc ")]) == "abc"
    assert bearer_token([("authorization", "Basic abc")]) is None
    assert bearer_token([("authorization", "Bearer ")]) is None
    assert bearer_token([("x-other", "Bearer abc")]) is None
    assert bearer_token(None) is None
    table = TokenTable.of_tokens(TOKENS)
    assert table.identify("other-token-2") and table.identify("s3cret-token-1")
    assert not table.identify("s3cret-token-") and not table.identify("") and not table.identify("ü")


# --- auth on a live server --------------------------------------------------------


async def test_auth_gates_inference_but_not_health(server):
    options = ServerOptions(auth_tokens=TOKENS)
    async with extra_server(server["models"], options) as port, \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.InferenceServiceStub(ch)
        out = await generate(stub, request("Hello", max_tokens=3), metadata=bearer(TOKENS[1]))
        assert out.finished is not None and len(out.token_ids) == 3

        for metadata, message in ((None, "missing bearer token"), (bearer("nope"), "invalid bearer token"),
                                  ((("authorization", TOKENS[0]),), "missing bearer token")):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await generate(stub, request("Hello", max_tokens=3), metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert message in err.value.details()
            info = details(err.value)["ErrorInfo"]
            assert (info.reason, info.domain) == ("UNAUTHENTICATED", "mlxgrpc.v1")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.ListModels(pb.ListModelsRequest(), metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

        # an unknown method reveals nothing before authentication
        unknown = ch.unary_unary("/mlxgrpc.v1.InferenceService/NoSuchMethod",
                                 request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await unknown(b"")
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await unknown(b"", metadata=bearer(TOKENS[0]))
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED

        health = health_pb2_grpc.HealthStub(ch)
        reply = await health.Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await list_services(ch)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "mlxgrpc.v1.InferenceService" in await list_services(ch, metadata=bearer(TOKENS[0]))


async def test_refused_streaming_calls_always_end_unauthenticated():
    """A client still sending when the server refuses the call gets the refusal, not
    INTERNAL: the refusing handler reads the burst of requests first."""
    async with extra_server(ModelSet([], []), ServerOptions(auth_tokens=TOKENS)) as port, \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        burst = [reflection_pb2.ServerReflectionRequest(file_containing_symbol="grpc.health.v1.Health")] * 5
        codes = []
        for _ in range(60):
            try:
                _ = [r async for r in stub.ServerReflectionInfo(iter(burst))]
                codes.append(grpc.StatusCode.OK)
            except grpc.aio.AioRpcError as err:
                codes.append(err.code())
        assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}, codes.count(grpc.StatusCode.INTERNAL)


async def test_reflection_can_stay_open_for_probes(server):
    options = ServerOptions(auth_tokens=TOKENS, auth_open_reflection=True)
    async with extra_server(server["models"], options) as port, \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        assert "mlxgrpc.v1.InferenceService" in await list_services(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pb_grpc.InferenceServiceStub(ch).ListModels(pb.ListModelsRequest())
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def list_services(channel, metadata=None) -> set[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                     metadata=metadata)
    replies = [r async for r in call]
    return {s.name for s in replies[0].list_services_response.service}


async def test_reflection_off_is_unimplemented():
    async with extra_server(ModelSet([], []), ServerOptions(reflection=False)) as port, \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        # Nothing is written: the server answers at the method lookup, and a request written
        # meanwhile could fail on the closed stream and surface as the client's own INTERNAL.
        call = reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo()
        assert await asyncio.wait_for(call.code(), 10) == grpc.StatusCode.UNIMPLEMENTED  # served: it would wait
        health = health_pb2_grpc.HealthStub(ch)  # the rest still serves
        await health.Check(health_pb2.HealthCheckRequest())


# --- TLS --------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, bytes]:
    """A throwaway CA, a server certificate for 127.0.0.1/localhost and a client
    certificate, made with the openssl CLI (EC P-256, valid one day)."""
    d = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=mlx-grpc test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=d)
    for name, ext in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        (d / f"{name}.ext").write_text(ext)
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext", cwd=d)
    files = {p.name: p for p in d.iterdir()}
    return {name: path.read_bytes() for name, path in files.items()} | {"dir": str(d).encode()}


async def _list_models(channel) -> list[str]:
    reply = await pb_grpc.InferenceServiceStub(channel).ListModels(pb.ListModelsRequest(), timeout=10)
    return [m.name for m in reply.models]


async def test_tls_serves_tls_only(server, pki):
    d = Path(pki["dir"].decode())
    creds = server_credentials(d / "server.pem", d / "server.key")
    async with extra_server(server["models"], credentials=creds) as port:
        trust = grpc.ssl_channel_credentials(root_certificates=pki["ca.pem"])
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", trust) as ch:
            assert "llama" in await _list_models(ch)
            out = await generate(pb_grpc.InferenceServiceStub(ch), request("Hello", max_tokens=2))
            assert len(out.token_ids) == 2
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _list_models(ch)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        untrusted = grpc.ssl_channel_credentials(root_certificates=pki["client.pem"])  # not the CA
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", untrusted) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _list_models(ch)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_requires_a_client_certificate(pki):
    d = Path(pki["dir"].decode())
    creds = server_credentials(d / "server.pem", d / "server.key", d / "ca.pem")
    async with extra_server(ModelSet([], []), credentials=creds) as port:
        with_cert = grpc.ssl_channel_credentials(root_certificates=pki["ca.pem"], private_key=pki["client.key"],
                                                 certificate_chain=pki["client.pem"])
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", with_cert) as ch:
            assert await _list_models(ch) == []
        without = grpc.ssl_channel_credentials(root_certificates=pki["ca.pem"])
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", without) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _list_models(ch)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        # a self-signed client certificate (not from the CA) is refused too
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", "rogue.key", "-out", "rogue.pem", "-days", "1", "-subj", "/CN=rogue", cwd=d)
        rogue = grpc.ssl_channel_credentials(root_certificates=pki["ca.pem"],
                                             private_key=(d / "rogue.key").read_bytes(),
                                             certificate_chain=(d / "rogue.pem").read_bytes())
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", rogue) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _list_models(ch)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE


# --- command line -----------------------------------------------------------------


def test_cli_security_flags(tmp_path, pki):
    d = Path(pki["dir"].decode())
    parser = cli.build_parser()
    tokens = tmp_path / "tokens"
    tokens.write_text("t1\nt2\n")
    args = parser.parse_args(["--log-format", "json", "serve", "--auth-token-file", str(tokens),
                              "--auth-open-reflection", "--tls-cert", str(d / "server.pem"),
                              "--tls-key", str(d / "server.key"), "--tls-client-ca", str(d / "ca.pem"),
                              "--metrics-port", "0", "--no-reflection"])
    options = cli.server_options(args, parser)
    assert options.auth_table.identify("t1") and options.auth_table.identify("t2") and options.auth_open_reflection
    assert options.metrics_port == 0 and not options.reflection and args.log_format == "json"
    assert isinstance(cli.tls_credentials(args, parser), grpc.ServerCredentials)

    for argv in (["serve", "--tls-cert", str(d / "server.pem")],
                 ["serve", "--tls-client-ca", str(d / "ca.pem")],
                 ["serve", "--tls-cert", str(d / "nope.pem"), "--tls-key", str(d / "server.key")]):
        args = parser.parse_args(argv)
        with pytest.raises(SystemExit):
            cli.tls_credentials(args, parser)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SystemExit):
        cli.server_options(parser.parse_args(["serve", "--auth-token-file", str(empty)]), parser)
    defaults = cli.server_options(parser.parse_args(["serve"]), parser)
    assert defaults.metrics_port is None and defaults.reflection


def test_cli_limit_flags():
    parser = cli.build_parser()
    args = parser.parse_args(["serve", "--max-prompt-bytes", "1000", "--max-chat-messages", "7",
                              "--max-stop-strings", "3", "--max-logit-bias", "9", "--max-embed-inputs", "5",
                              "--max-embed-input-bytes", "600"])
    limits = cli.build_limits(args)
    assert (limits.max_prompt_bytes, limits.max_chat_messages, limits.max_stop_strings) == (1000, 7, 3)
    assert (limits.max_logit_bias, limits.max_stop_token_ids) == (9, 9)
    assert (limits.max_embed_inputs, limits.max_embed_input_bytes) == (5, 600)
    assert cli.server_options(args, parser).limits == limits
    sized = cli.build_limits(parser.parse_args(["serve"])).for_context(8192)
    assert (sized.max_prompt_tokens, sized.max_prompt_bytes, sized.max_chat_messages) == (8191, 8191 * 32, 8191)
