"""SMG's full worker contract (vllm.grpc.engine.VllmEngine) on the session server: Generate
against the mlx-lm oracle, constraints, stop strings, n samples, refusals, loads, the cache
flush and, on a server whose worker model is an embedding model, Embed."""

from __future__ import annotations

import asyncio
import json

import grpc
import jsonschema
import numpy as np
import pytest
from smg_grpc_proto import vllm_engine_pb2 as vllm_pb
from smg_grpc_proto import vllm_engine_pb2_grpc as vllm_grpc
from smg_grpc_proto.generated import common_pb2

from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.server import ServerOptions
from tests.conftest import DECODER_EMBEDDER
from tests.helpers import details
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS
from tests.test_ops_security import extra_server, list_services

NAME = list(ORACLE_PROMPTS)[0]


@pytest.fixture(scope="module")
def worker(channel):
    return vllm_grpc.VllmEngineStub(channel)


async def prompt_ids(stub, text: str) -> list[int]:
    return list((await stub.Tokenize(pb.TokenizeRequest(model="llama", text=text, add_special_tokens=True))).token_ids)


def tokenized(ids, *, stream=True, request_id="", **sampling) -> vllm_pb.GenerateRequest:
    sampling.setdefault("temperature", 0.0)
    return vllm_pb.GenerateRequest(request_id=request_id, tokenized=vllm_pb.TokenizedInput(input_ids=ids),
                                   sampling_params=vllm_pb.SamplingParams(**sampling), stream=stream)


async def collect(worker, req) -> dict[int, tuple[list[int], vllm_pb.GenerateComplete]]:
    """Per sample index: its streamed tokens and its GenerateComplete."""
    out: dict[int, tuple[list[int], vllm_pb.GenerateComplete | None]] = {}
    async for r in worker.Generate(req):
        which = r.WhichOneof("response")
        index = getattr(r, which).index
        tokens, complete = out.setdefault(index, ([], None))
        assert complete is None, "a chunk after the sample completed"
        if which == "chunk":
            tokens.extend(r.chunk.token_ids)
        else:
            out[index] = (tokens or list(r.complete.output_ids), r.complete)
    return out  # type: ignore[return-value]


async def text_of(stub, ids) -> str:
    return (await stub.Detokenize(pb.DetokenizeRequest(model="llama", token_ids=ids))).text


async def test_reflection_lists_both_contracts_and_health_names_them(channel):
    services = await list_services(channel)
    assert {"vllm.grpc.engine.VllmEngine", "mlx.grpc.engine.MlxEngine"} <= set(services)


async def test_greedy_generate_matches_mlx_lm_streamed_and_not(stub, worker, oracle):
    ids = await prompt_ids(stub, ORACLE_PROMPTS[NAME])
    for stream in (True, False):
        (tokens, complete), = (await collect(worker, tokenized(ids, stream=stream,
                                                                max_tokens=ORACLE_TOKENS[NAME]))).values()
        assert tokens == oracle["llama"][NAME]
        assert complete.finish_reason == "length" and complete.prompt_tokens == len(ids)


async def test_a_json_schema_constraint_holds(stub, worker):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                               "age": {"type": "integer"}}, "required": ["name", "age"]}
    ids = await prompt_ids(stub, "A person as JSON:")
    for seed in range(3):
        (tokens, complete), = (await collect(worker, tokenized(
            ids, temperature=1.0, seed=seed, max_tokens=60, json_schema=json.dumps(schema)))).values()
        assert complete.finish_reason == "stop"
        jsonschema.validate(json.loads(await text_of(stub, tokens)), schema)


async def test_choice_and_regex_constraints_hold(stub, worker):
    ids = await prompt_ids(stub, "Pick one:")
    choices = ("red", "green", "blue")
    (tokens, _), = (await collect(worker, tokenized(ids, temperature=1.0, seed=5, max_tokens=10,
                                                   choice=vllm_pb.ChoiceConstraint(choices=choices)))).values()
    assert await text_of(stub, tokens) in choices
    (tokens, _), = (await collect(worker, tokenized(ids, temperature=1.0, seed=5, max_tokens=10,
                                                   regex="[0-9]{3}"))).values()
    assert len(await text_of(stub, tokens)) == 3 and (await text_of(stub, tokens)).isdigit()


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}


def mistral_calls(at_most_one: bool) -> dict:
    """What SMG sends for tool_choice required with --tool-call-parser mistral (one tool)."""
    call = {"begin": '{"name": "get_weather", "arguments": ',
            "content": {"type": "json_schema", "json_schema": WEATHER}, "end": "}"}
    return {"format": {"type": "triggered_tags", "triggers": ["[TOOL_CALLS]"], "at_least_one": True,
                       "stop_after_first": at_most_one,
                       "tags": [{"begin": "[TOOL_CALLS] [", "end": "]", "content": {
                           "type": "tags_with_separator", "tags": [call], "separator": ", ", "at_least_one": True,
                           "stop_after_first": at_most_one}}]}}


async def test_a_structural_tag_constrains_the_calls_it_describes(stub, worker):
    ids = await prompt_ids(stub, "Call the tool:")
    for seed in range(3):
        (tokens, complete), = (await collect(worker, tokenized(
            ids, temperature=1.0, seed=seed, max_tokens=80,
            structural_tag=json.dumps(mistral_calls(at_most_one=True))))).values()
        text = await text_of(stub, tokens)
        assert complete.finish_reason == "stop" and text.startswith("[TOOL_CALLS] [") and text.endswith("]"), text
        (call,) = json.loads(text[len("[TOOL_CALLS] "):])
        assert call["name"] == "get_weather"
        jsonschema.validate(call["arguments"], {**WEATHER, "additionalProperties": False})


async def test_a_stop_string_ends_the_sample_and_is_reported(stub, worker, oracle):
    ids = await prompt_ids(stub, ORACLE_PROMPTS[NAME])
    full = await text_of(stub, oracle["llama"][NAME])
    stop = full[len(full) // 2:len(full) // 2 + 3]
    assert stop.strip(), full
    (tokens, complete), = (await collect(worker, tokenized(ids, max_tokens=ORACLE_TOKENS[NAME],
                                                           stop=[stop]))).values()
    assert complete.finish_reason == "stop" and complete.matched_stop_str == stop
    assert tokens == oracle["llama"][NAME][:len(tokens)] and len(tokens) < ORACLE_TOKENS[NAME]
    assert stop in await text_of(stub, tokens)  # the gateway cuts the text; the ids run through the stop


async def test_n_samples_stream_with_their_index_and_seeds_reproduce(stub, worker, server):
    ids = await prompt_ids(stub, "Three different answers:")
    request = tokenized(ids, temperature=1.0, seed=11, max_tokens=12, n=3, request_id="three")
    engine = server["models"].generator("llama")
    before = (await engine.stats()).prompt_tokens_computed
    first = await collect(worker, request)
    assert (await engine.stats()).prompt_tokens_computed - before <= len(ids) - 1  # one prompt prefill for 3
    assert sorted(first) == [0, 1, 2]
    assert all(c.finish_reason == "length" and len(t) == 12 for t, c in first.values())
    again = await collect(worker, request)
    assert {i: t for i, (t, _) in first.items()} == {i: t for i, (t, _) in again.items()}
    assert len({tuple(t) for t, _ in first.values()}) > 1  # seed + index: different samples
    one = await collect(worker, tokenized(ids, temperature=1.0, seed=12, max_tokens=12))
    assert one[0][0] == first[1][0]  # sample 1 of seed 11 is seeded 12


async def test_abort_ends_every_sample_of_a_request(stub, worker):
    ids = await prompt_ids(stub, "A long one:")
    call = worker.Generate(tokenized(ids, max_tokens=3000, n=2, request_id="abort-me", ignore_eos=True))
    first = await call.read()
    assert first.WhichOneof("response") == "chunk"
    await worker.Abort(vllm_pb.AbortRequest(request_ids=["abort-me"]))
    completes = []
    while (r := await call.read()) is not grpc.aio.EOF:
        if r.WhichOneof("response") == "complete":
            completes.append(r.complete)
    assert sorted(c.index for c in completes) == [0, 1]
    assert {c.finish_reason for c in completes} == {"abort"}


@pytest.mark.parametrize("field, request_", [
    ("kv_transfer_params", vllm_pb.GenerateRequest(text="x", kv_transfer_params=vllm_pb.KvTransferParams(
        remote_host="h", remote_port=1))),
    ("data_parallel_rank", vllm_pb.GenerateRequest(text="x", data_parallel_rank=1)),
    ("sampling_params.structural_tag", vllm_pb.GenerateRequest(
        text="x", sampling_params=vllm_pb.SamplingParams(structural_tag='{"format": {"type": "any_text"}}'))),
    ("sampling_params.prompt_logprobs", vllm_pb.GenerateRequest(
        text="x", sampling_params=vllm_pb.SamplingParams(prompt_logprobs=-1))),  # every token of the vocabulary
    ("sampling_params.n", vllm_pb.GenerateRequest(text="x", sampling_params=vllm_pb.SamplingParams(n=17))),
    ("sampling_params.json_schema", vllm_pb.GenerateRequest(
        text="x", sampling_params=vllm_pb.SamplingParams(json_schema="{not json"))),
    ("sampling_params.min_tokens", vllm_pb.GenerateRequest(
        text="x", sampling_params=vllm_pb.SamplingParams(max_tokens=2, min_tokens=5))),
])
async def test_what_is_not_served_is_refused_naming_the_field(worker, field, request_):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in worker.Generate(request_):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details(err.value)["BadRequest"].field_violations] == [field], err.value.details()


async def test_loads_flush_and_profiling(stub, worker):
    ids = await prompt_ids(stub, "A prompt long enough to be kept in the prefix cache, " * 4)
    await collect(worker, tokenized(ids, max_tokens=2))
    loads = await worker.GetLoads(vllm_pb.GetLoadsRequest())
    load, = loads.loads
    assert loads.dp_rank_count == 1 and load.max_running_requests == 8 and load.max_total_num_tokens > 0
    flushed = await worker.FlushCache(common_pb2.FlushCacheRequest())
    assert flushed.success and flushed.message.startswith("dropped ")
    (_, complete), = (await collect(worker, tokenized(ids, max_tokens=2))).values()
    assert complete.cached_tokens == 0  # nothing left to reuse
    (_, complete), = (await collect(worker, tokenized(ids, max_tokens=2))).values()
    assert complete.cached_tokens > 0
    assert not (await worker.StartProfile(common_pb2.StartProfileRequest())).success


async def test_model_info_and_server_info(worker, fixture_models):
    info = await worker.GetModelInfo(vllm_pb.GetModelInfoRequest())
    assert info.served_model_name == "llama" and info.is_generation and info.max_context_length == 4096
    assert (await worker.GetServerInfo(vllm_pb.GetServerInfoRequest())).server_type == "mlx-grpc"
    assert (await worker.HealthCheck(vllm_pb.HealthCheckRequest())).healthy


async def test_an_embedding_worker_embeds_token_ids_as_our_embed_does(server, stub):
    options = ServerOptions(smg_worker_model=DECODER_EMBEDDER, smg_contract="vllm")
    async with extra_server(server["models"], options) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        worker = vllm_grpc.VllmEngineStub(ch)
        assert "mlx.grpc.engine.MlxEngine" not in await list_services(ch)
        info = await worker.GetModelInfo(vllm_pb.GetModelInfoRequest())
        assert info.served_model_name == DECODER_EMBEDDER and not info.is_generation
        text = "a sentence to embed"
        ids = (await stub.Tokenize(pb.TokenizeRequest(model=DECODER_EMBEDDER, text=text,
                                                      add_special_tokens=True))).token_ids
        got = await worker.Embed(vllm_pb.EmbedRequest(request_id="e1", tokenized=vllm_pb.TokenizedInput(
            input_ids=ids)))
        assert got.prompt_tokens == len(ids) and got.embedding_dim == len(got.embedding)
        assert abs(np.linalg.norm(got.embedding) - 1.0) < 1e-5
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await worker.Embed(vllm_pb.EmbedRequest(tokenized=vllm_pb.TokenizedInput(input_ids=[10**7])))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in worker.Generate(vllm_pb.GenerateRequest(text="x")):
                pass
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_kv_events_follow_the_prefix_cache(stub, worker, server):
    """Stored blocks chain from the namespace; a flush clears them; resuming replays."""
    block = server["models"].generator("llama").blocks.block_size
    call = worker.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(load_records_before_first_batch=True))
    first = await asyncio.wait_for(call.read(), 10)  # a snapshot, or a load record while nothing is stored
    assert first.load.max_running_requests == 8
    ids = await prompt_ids(stub, "Blocks of this prompt are published for the router to see. " * 3)
    await collect(worker, tokenized(ids, max_tokens=2))
    stored = None
    while stored is None:
        batch = await asyncio.wait_for(call.read(), 10)
        for event in batch.events:
            if event.HasField("stored") and len(event.stored.blocks) >= len(ids) // block - 1:
                stored = (batch.sequence_number, event.stored)
    sequence, event = stored
    tokens = [t for b in event.blocks for t in b.token_ids]
    assert all(b.block_size == block and len(b.token_ids) == block for b in event.blocks)
    assert not event.HasField("parent_block_hash") and tokens == ids[:len(tokens)]  # a new chain: the prompt's blocks
    await worker.FlushCache(common_pb2.FlushCacheRequest())
    cleared = None
    while cleared is None:
        batch = await asyncio.wait_for(call.read(), 10)
        cleared = next((e for e in batch.events if e.HasField("cleared")), None)
    call.cancel()
    resumed = worker.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(start_sequence_number=sequence))
    replayed = [await asyncio.wait_for(resumed.read(), 10) for _ in range(batch.sequence_number - sequence)]
    assert [b.sequence_number for b in replayed] == list(range(sequence + 1, batch.sequence_number + 1))
    assert replayed[-1].events[-1].HasField("cleared")  # the same batches, in order
    resumed.cancel()


async def test_a_worker_model_naming_an_adapter_that_is_not_loaded_is_unhealthy(server):
    options = ServerOptions(smg_worker_model="llama:absent")
    async with extra_server(server["models"], options) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        worker = vllm_grpc.VllmEngineStub(ch)
        health = await worker.HealthCheck(vllm_pb.HealthCheckRequest())
        assert not health.healthy and "'absent'" in health.message
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in worker.Generate(vllm_pb.GenerateRequest(text="x")):
                pass
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_structural_tags_as_smg_builds_them_compile():
    from llguidance import LLMatcher

    from service.worker.structural_tag import structural_tag_grammar

    for tag in (mistral_calls(False), mistral_calls(True),
                {"structures": [{"begin": "<tool_call>", "schema": WEATHER, "end": "</tool_call>"}],
                 "triggers": ["<tool_call>"]}):
        grammar = LLMatcher.grammar_from_lark(structural_tag_grammar(json.dumps(tag)))
        assert LLMatcher.validate_grammar(grammar) == ""
