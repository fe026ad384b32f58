"""SMG's worker contract around Generate: health, model and server info, the
tokenizer bundle, the flag that turns it off, auth, drain and metrics."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
import zipfile

import grpc
import pytest
from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
from smg_grpc_proto import mlx_engine_pb2_grpc as mlx_grpc
from smg_grpc_proto.generated import common_pb2
from tokenizers import Tokenizer

from engine.loading.tokenizer_files import tokenizer_files
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.interceptors import ServerState
from service.server import ServerOptions
from service.worker.tokenizer_bundle import CHUNK_BYTES
from tests.helpers import details
from tests.test_ops_observability import metered_server, scrape, value
from tests.test_ops_security import TOKENS, bearer, extra_server, list_services

WORKER = "mlx.grpc.engine.MlxEngine"
GENERATE = mlx_pb.GenerateRequest(text="Hello metrics", stream=True, sampling_params=mlx_pb.SamplingParams(
    temperature=0.0, max_tokens=5))


@pytest.fixture(scope="module")
def worker(channel):
    return mlx_grpc.MlxEngineStub(channel)


async def test_health_model_and_server_info(stub, worker, fixture_models):
    assert await worker.HealthCheck(mlx_pb.HealthCheckRequest()) == mlx_pb.HealthCheckResponse(
        healthy=True, message="OK")
    info = await worker.GetModelInfo(mlx_pb.GetModelInfoRequest())
    ours = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"))).info
    config = json.loads((fixture_models["llama"] / "config.json").read_text())
    assert info.served_model_name == "llama" and info.model_path == str(fixture_models["llama"])
    assert info.is_generation and info.model_type == config["model_type"]
    assert list(info.architectures) == config["architectures"]
    assert info.vocab_size == ours.vocab_size and list(info.eos_token_ids) == list(ours.eos_token_ids)
    assert info.max_context_length == ours.context_length and info.max_req_input_len == ours.context_length - 1

    call = worker.Generate(mlx_pb.GenerateRequest(text="A long one", stream=True, sampling_params=mlx_pb.SamplingParams(
        temperature=0.0, max_tokens=1000)))
    await call.read()
    server_info = await worker.GetServerInfo(mlx_pb.GetServerInfoRequest())
    call.cancel()
    assert server_info.server_type == "mlx-grpc" and server_info.active_requests >= 1
    assert server_info.uptime_seconds > 0


async def test_the_tokenizer_bundle_is_a_deterministic_zip_in_chunks(stub, worker):
    chunks = [c async for c in worker.GetTokenizer(common_pb2.GetTokenizerRequest())]
    assert all(len(c.data) == CHUNK_BYTES and not c.sha256 for c in chunks[:-1])
    assert 0 < len(chunks[-1].data) <= CHUNK_BYTES
    data = b"".join(c.data for c in chunks)
    assert chunks[-1].sha256 == hashlib.sha256(data).hexdigest()
    again = [c async for c in worker.GetTokenizer(common_pb2.GetTokenizerRequest())]
    assert again[-1].sha256 == chunks[-1].sha256

    archive = zipfile.ZipFile(io.BytesIO(data))
    assert {"tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json",
            "special_tokens_map.json"} <= set(archive.namelist())
    assert json.loads(archive.read("tokenizer_config.json"))["chat_template"]
    tokenizer = Tokenizer.from_str(archive.read("tokenizer.json").decode())
    text = "The keeper counted 12 boats."
    ours = await stub.Tokenize(pb.TokenizeRequest(model="llama", text=text))
    assert tokenizer.encode(text, add_special_tokens=False).ids == list(ours.token_ids)


def test_a_template_held_only_by_the_tokenizer_is_written_into_its_config(server, tmp_path):
    loaded = server["models"].generator("llama").loaded
    copy = shutil.copytree(loaded.artifact, tmp_path / "llama")
    config = json.loads((copy / "tokenizer_config.json").read_text())
    template = config.pop("chat_template")
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    files = tokenizer_files(dataclasses.replace(loaded, artifact=copy))
    assert json.loads(files["tokenizer_config.json"])["chat_template"] == template
    assert files["tokenizer.json"] == (copy / "tokenizer.json").read_bytes()


async def test_the_flag_turns_the_contract_off(server):
    async with extra_server(server["models"], ServerOptions(smg_worker=False)) as port, \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        assert WORKER not in await list_services(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await mlx_grpc.MlxEngineStub(ch).HealthCheck(mlx_pb.HealthCheckRequest())
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    async with extra_server(server["models"]) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        assert WORKER in await list_services(ch)


async def test_auth_gates_the_contract_but_not_its_health_check(server):
    async with extra_server(server["models"], ServerOptions(auth_tokens=TOKENS)) as port, \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        worker = mlx_grpc.MlxEngineStub(ch)
        assert (await worker.HealthCheck(mlx_pb.HealthCheckRequest())).healthy
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await worker.GetServerInfo(mlx_pb.GetServerInfoRequest())
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        responses = [r async for r in worker.Generate(GENERATE, metadata=bearer(TOKENS[0]))]
        assert responses[-1].complete.completion_tokens == 5


async def test_while_draining_health_says_so_and_work_is_refused(server):
    state = ServerState()
    async with metered_server(server["models"], state=state, stub=mlx_grpc.MlxEngineStub) as (worker, _):
        state.draining = True
        assert await worker.HealthCheck(mlx_pb.HealthCheckRequest()) == mlx_pb.HealthCheckResponse(
            healthy=False, message="draining")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            [r async for r in worker.Generate(GENERATE)]
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert details(err.value)["ErrorInfo"].reason == "DRAINING"


async def test_metrics_and_the_access_log_count_the_contract_per_model(server):
    async with metered_server(server["models"], stub=mlx_grpc.MlxEngineStub) as (worker, http_port):
        streamed = [r async for r in worker.Generate(GENERATE)]
        unstreamed = [r async for r in worker.Generate(mlx_pb.GenerateRequest(
            text="Hello metrics", stream=False, sampling_params=GENERATE.sampling_params))]
        m = await scrape(http_port)
    assert len(streamed) == 6 and len(unstreamed) == 1
    labels = {"service": WORKER, "method": "Generate"}
    assert value(m, "mlxgrpc_requests_total", code="OK", **labels) == 2
    assert value(m, "mlxgrpc_generated_tokens_total", model="llama") == 10
    assert value(m, "mlxgrpc_time_to_first_token_seconds_count", model="llama") == 2
    assert value(m, "mlxgrpc_prompt_tokens_total", model="llama") == 2 * streamed[-1].complete.prompt_tokens
