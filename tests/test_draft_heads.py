"""Draft heads that read the target's hidden states: a checkpoint's own MTP layer
(``--draft-model mtp``) and an EAGLE-3 head directory. The output never changes
(greedy, seeded, choices, in a batch mixed with other modes, after a cached prefix);
a head that is always right has every draft accepted, several tokens a step; the
capability facts say what is loaded; heads that cannot serve the target are refused
at start, by name."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
import pytest_asyncio

from engine.events import Delta, Finished
from engine.generation.config import GenerationConfig, SpeculationConfig
from engine.generation.core.speculation.heads import HeadMismatch
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import (
    GenerationRequest,
    SamplingOptions,
    SpeculationMode,
    SpeculationOptions,
    StopOptions,
    TextPrompt,
)
from service.convert import model_info
from tests.fixtures.draft_heads import build_eagle3, build_mimo
from tests.oracle import ORACLE_PROMPTS

OFF, NGRAM, DRAFT = SpeculationMode.OFF, SpeculationMode.NGRAM, SpeculationMode.DRAFT
PROMPTS = list(ORACLE_PROMPTS.values())


@pytest.fixture(scope="module")
def heads(tmp_path_factory, fixture_models):
    root = tmp_path_factory.mktemp("heads")
    return {"copying": build_mimo(root / "mimo-copying", copying=True), "mimo": build_mimo(root / "mimo", seed=3),
            "eagle3": build_eagle3(fixture_models["llama"], root / "eagle3-head")}


@pytest_asyncio.fixture(scope="module")
async def engines(heads, fixture_models):
    made = {
        "copying": GenerationEngine(str(heads["copying"]), name="copying", config=GenerationConfig(draft_model="mtp")),
        "mimo": GenerationEngine(str(heads["mimo"]), name="mimo", config=GenerationConfig(draft_model="mtp")),
        "eagle3": GenerationEngine(str(fixture_models["llama"]), name="eagle3",
                                   config=GenerationConfig(draft_model=str(heads["eagle3"]))),
    }
    for e in made.values():
        await e.start()
    yield made
    for e in made.values():
        await e.close()


async def run(engine, prompt: str, mode=DRAFT, *, k: int = 4, tokens: int = 32, seed: int | None = None, n: int = 1):
    """(tokens per choice, usage, deltas)."""
    req = GenerationRequest(TextPrompt(prompt), stopping=StopOptions(max_tokens=tokens), n=n,
                            speculation=SpeculationOptions(mode, k),
                            sampling=SamplingOptions(temperature=0.9, seed=seed) if seed is not None
                            else SamplingOptions())
    ids: dict[int, list[int]] = {}
    usage, deltas = None, 0
    async for ev in engine.generate(req):
        if isinstance(ev, Delta):
            ids.setdefault(ev.choice, []).extend(ev.token_ids)
            deltas += 1
        elif isinstance(ev, Finished):
            usage = ev.usage if usage is None else usage
    return [ids.get(i, []) for i in range(n)], usage, deltas


@pytest.mark.parametrize("kind", ["copying", "mimo", "eagle3"])
@pytest.mark.parametrize("seed", [None, 5])
async def test_a_head_never_changes_the_output(engines, kind, seed):
    e = engines[kind]
    for prompt in PROMPTS:
        plain, _, _ = await run(e, prompt, OFF, seed=seed)
        drafted, usage, _ = await run(e, prompt, DRAFT, seed=seed)
        assert drafted == plain, prompt
        assert 0 < usage.draft_tokens and usage.accepted_draft_tokens <= usage.draft_tokens


async def test_a_head_that_is_always_right_has_every_draft_accepted(engines):
    e = engines["copying"]
    for prompt in PROMPTS:
        (ids,), usage, deltas = await run(e, prompt, DRAFT, k=6, tokens=40)
        assert len(ids) == 40
        assert usage.draft_tokens > 0 and usage.accepted_draft_tokens == usage.draft_tokens
        assert deltas <= len(ids) - usage.accepted_draft_tokens  # one step per delta at most: several tokens each


@pytest.mark.parametrize("kind", ["mimo", "eagle3"])
async def test_rows_drafted_by_a_head_in_a_mixed_batch_equal_their_solo_outputs(engines, kind):
    e = engines[kind]
    modes = [DRAFT, OFF, NGRAM, DRAFT, DRAFT, OFF, NGRAM, DRAFT]
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(len(modes))]
    solo = [await run(e, p, OFF) for p in prompts]
    mixed = await asyncio.gather(*(run(e, p, m) for p, m in zip(prompts, modes)))
    assert [m[0] for m in mixed] == [s[0] for s in solo]
    choices, _, _ = await run(e, PROMPTS[0], DRAFT, seed=9, n=3)
    assert choices == (await run(e, PROMPTS[0], OFF, seed=9, n=3))[0]


async def test_a_cached_prefix_leaves_the_output_as_it_was(engines):
    e = engines["eagle3"]
    prompt = PROMPTS[-1] * 3
    first, _, _ = await run(e, prompt, DRAFT)
    again, usage, _ = await run(e, prompt, DRAFT)  # the prompt's prefix now comes from the cache
    assert again == first == (await run(e, prompt, OFF))[0]
    assert usage.cached_tokens > 0


async def test_the_capabilities_say_which_head_is_loaded(engines, fixture_models):
    mtp = engines["mimo"].describe().capabilities
    assert mtp.native_draft is not None and mtp.native_draft.kind == "mtp"
    assert mtp.native_draft.num_draft_tokens == SpeculationConfig().max_draft_tokens
    assert DRAFT in mtp.speculation.modes and mtp.speculation.draft_model == "mtp" and mtp.hidden_layer_taps
    eagle = engines["eagle3"].describe().capabilities
    assert eagle.native_draft is None and eagle.speculation.draft_model == "eagle3-head" and eagle.hidden_layer_taps
    info = model_info(engines["mimo"].describe())
    assert info.capabilities.native_draft.kind == "mtp" and info.capabilities.hidden_layer_taps
    assert not model_info(engines["eagle3"].describe()).capabilities.HasField("native_draft")
    sliding = GenerationEngine(str(fixture_models["sliding"]), name="sliding")
    await sliding.start()
    try:  # caches that cannot roll back: nothing can verify what a head drafts
        assert not sliding.describe().capabilities.hidden_layer_taps
    finally:
        await sliding.close()


async def test_memory_plans_count_the_head_weights_and_its_cache(engines, heads):
    bare = GenerationEngine(str(heads["mimo"]), name="bare")
    await bare.start()
    try:
        without, with_head = await bare.plan_memory(1024), await engines["mimo"].plan_memory(1024)
    finally:
        await bare.close()
    import mlx.core as mx

    mtp = [v for k, v in mx.load(str(heads["mimo"] / "model.safetensors")).items() if k.startswith("model.mtp_layers.")]
    assert with_head.weights_bytes - without.weights_bytes == sum(v.nbytes for v in mtp)
    assert with_head.kv_bytes > without.kv_bytes


def _edited(src, dst, **changes):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    for key, value in changes.items():
        if key == "layers":
            config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = value
        else:
            config[key] = value
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize("case", ["no mtp", "tap past the last layer", "another width", "sliding windows"])
async def test_a_head_that_cannot_serve_the_target_is_refused_at_start(heads, fixture_models, tmp_path, case):
    source, draft, match = {
        "no mtp": lambda: (fixture_models["llama"], "mtp", "carries no MTP layers"),
        "tap past the last layer": lambda: (fixture_models["llama"], _edited(heads["eagle3"], tmp_path / "h",
                                                                             layers=[0, 5]), "taps layers"),
        "another width": lambda: (fixture_models["llama"], _edited(heads["eagle3"], tmp_path / "h",
                                                                   target_hidden_size=96), "hidden states of width 96"),
        "sliding windows": lambda: (fixture_models["sliding"], heads["eagle3"], "cannot roll back"),
    }[case]()
    engine = GenerationEngine(str(source), name="refused", config=GenerationConfig(draft_model=str(draft)))
    with pytest.raises(HeadMismatch, match=match):
        await engine.start()
    await engine.close()
