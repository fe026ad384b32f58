"""Two tenants, every RPC of the three services fuzzed (tests/rpc_strategies.py): ``beta`` never
receives ``acme``'s canary text, prompt token ids, tenant name, the server's paths or prefix-cache
hits, never cancels acme's requests, never gets INTERNAL or UNKNOWN, and the server is SERVING
afterwards (tests/tenant_fuzz_harness.py says what counts as a finding).

A server of its own with small limits over the llama fixture (and the qwen3 fixture as an
embedding model, the three-label classifier fixture as "classify", the SPLADE fixture as
"sparse", the Whisper fixture as "speech"), a tokens file with acme, beta, ops (admin) and, where the role exists, a router;
a seeded hypothesis run on a worker thread while the test's event loop serves. The long run is
``python -m bench.fuzz``.
"""

from __future__ import annotations

import asyncio
import os

import grpc
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from engine.embedding.engine import EmbeddingEngine
from engine.generation.core.scheduling.scheduler import SchedulerConfig
from engine.generation.frontend.engine import GenerationConfig, GenerationEngine
from engine.models import ModelSet
from engine.speech.engine import SpeechEngine
from engine.validation import Limits
from service.bearer_tokens import load_table
from service.server import ServerOptions, create_server, set_health
from tests import tenant_fuzz_harness as harness
from tests.fixtures.cross_encoder import build_classifier
from tests.fixtures.splade import build_splade
from tests.fixtures.whisper import build_whisper
from tests.rpc_strategies import Sizes, calls, rpcs

# the server's engine threads run in this process: hypothesis notices their use of `random`
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
EXAMPLES = int(os.environ.get("MLXGRPC_TENANT_FUZZ_EXAMPLES", "600"))
SEED = 45
MODEL = "llama"
LIMITS = Limits(max_tokens=8, max_prompt_tokens=160, max_prompt_bytes=4096, max_chat_messages=8,
                max_stop_strings=4, max_logit_bias=16, max_stop_token_ids=16, max_embed_inputs=4,
                max_embed_input_bytes=4096)
SIZES = Sizes(repeat=4, depth=4, huge=(300, 3_000, 20_000))


@pytest.fixture(scope="module")
async def tenant_server(fixture_models, tmp_path_factory):
    from grpc_health.v1 import health

    root = tmp_path_factory.mktemp("tenant-fuzz")
    tokens = harness.tokens_file(root / "tokens")
    config = GenerationConfig(limits=LIMITS, scheduler=SchedulerConfig(max_active=4, max_queued=16, prefill_chunk=16))
    classifier, splade = build_classifier(root / "classify"), build_splade(root / "sparse")
    models = ModelSet([GenerationEngine(str(fixture_models["llama"]), name=MODEL, config=config)],
                      [EmbeddingEngine(fixture_models["qwen3"], name="embed", limits=LIMITS),
                       EmbeddingEngine(classifier, name="classify", limits=LIMITS),
                       EmbeddingEngine(splade, name="sparse", limits=LIMITS)],
                      speech=[SpeechEngine(build_whisper(root / "speech"), name="speech", limits=LIMITS)])
    await models.start()
    health_servicer = health.aio.HealthServicer()
    options = ServerOptions(auth_table=load_table(tokens, {}), limits=LIMITS, access_log=False)
    srv, port = await create_server("127.0.0.1:0", models, options=options, health_servicer=health_servicer)
    await srv.start()
    await set_health(health_servicer, True)
    paths = [str(fixture_models["llama"]), str(fixture_models["qwen3"]), str(classifier), str(splade),
             str(tokens), str(tmp_path_factory.getbasetemp())]
    yield {"address": f"127.0.0.1:{port}", "paths": paths}
    await srv.stop(0.5)
    await models.close()


def _fuzz(address: str, paths: list[str]) -> dict:
    tally = harness.Tally()
    poller = harness.HealthPoller(address)
    poller.start()
    with grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
        secrets = harness.plant(channel, SEED, MODEL, paths)
        fuzzer = harness.Fuzzer(channel, secrets, tally, call_timeout_s=60)
        probes = fuzzer.probe(MODEL)
        router = harness.router_sees_acme(channel, secrets) if harness.has_router_role() else None
        acme = harness.AcmeLoop(channel, secrets, tally, MODEL)
        acme.start()
        methods = rpcs()

        @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(calls(methods, SIZES), st.sampled_from(harness.CALLERS))
        def fuzz(call, caller):
            fuzzer.send(call, caller)

        try:
            fuzz()
        finally:
            acme.stop.set()
            acme.join(120)
            poller.stop.set()
            poller.join(30)
    return {"tally": tally, "probes": probes, "router": router, "acme": acme.outcomes,
            "methods": {m.name for m in methods}, "serving": harness.serving(address),
            "health_max_s": max(poller.latencies, default=0.0)}


@pytest.fixture(scope="module")
async def fuzzed(tenant_server):
    return await asyncio.to_thread(_fuzz, tenant_server["address"], tenant_server["paths"])


def _summary(found: dict) -> str:
    tally = found["tally"]
    return f"{tally.sent} calls, statuses {dict(tally.statuses.most_common())}"


async def test_every_rpc_of_the_three_services_was_fuzzed(fuzzed):
    tally = fuzzed["tally"]
    print(_summary(fuzzed), tally.report(), sep="\n")
    assert tally.sent >= EXAMPLES
    assert {name for name, _ in tally.by_method} == fuzzed["methods"]
    assert sum(fuzzed["acme"].values()) > 0, "acme's background requests never ran"


async def test_beta_never_hits_acmes_prefix_cache(fuzzed):
    print("\n".join(fuzzed["probes"]))
    assert not fuzzed["tally"].count(harness.CACHE_HIT), fuzzed["tally"].report(harness.CACHE_HIT)


async def test_no_answer_to_beta_holds_acmes_prompt_ids(fuzzed):
    assert not fuzzed["tally"].count(harness.IDS), fuzzed["tally"].report(harness.IDS)


async def test_no_answer_to_beta_holds_acmes_text_or_name(fuzzed):
    tally = fuzzed["tally"]
    assert not tally.count(harness.TEXT, harness.NAME), tally.report(harness.TEXT, harness.NAME)


async def test_no_answer_to_beta_holds_a_server_path(fuzzed):
    assert not fuzzed["tally"].count(harness.PATH), fuzzed["tally"].report(harness.PATH)


async def test_beta_never_cancels_acmes_requests(fuzzed):
    assert not fuzzed["tally"].count(harness.CANCELLED), fuzzed["tally"].report(harness.CANCELLED)


async def test_no_fuzzed_call_answers_internal_or_unknown(fuzzed):
    assert not fuzzed["tally"].count(harness.STATUS), fuzzed["tally"].report(harness.STATUS)


async def test_the_server_is_serving_after_the_fuzz(fuzzed):
    assert fuzzed["serving"]


async def test_the_router_receives_acmes_token_ids(fuzzed):
    """The id detector works on real KV events: the router role, which routes on them, gets them."""
    if fuzzed["router"] is None:
        pytest.skip("no router role in this build")
    assert fuzzed["router"]
