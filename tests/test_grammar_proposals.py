"""Grammar proposals: the tokens a response format allows alone are proposed as drafts
and verified; the text is byte-identical with them on or off, with speculation off,
and in a batch mixed with free rows; the capability says where they run."""

from __future__ import annotations

import asyncio
import json

import pytest
import pytest_asyncio

from engine.events import Delta, Finished
from engine.generation.config import GenerationConfig, SpeculationConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import (
    FormatKind,
    GenerationRequest,
    ResponseFormat,
    SamplingOptions,
    SpeculationMode,
    SpeculationOptions,
    StopOptions,
    TextPrompt,
)
from tests.structured_prompts import EXTRACTIONS

SCHEMAS = [schema for schema, _ in EXTRACTIONS[::5]]  # one of each kind


@pytest_asyncio.fixture(scope="module")
async def engines(fixture_models):
    """The llama fixture twice: grammar proposals on (the default) and off."""
    made = [GenerationEngine(str(fixture_models["llama"]), name=f"grammar-{on}", config=GenerationConfig(
        speculation=SpeculationConfig(grammar_proposals=on))) for on in (True, False)]
    for e in made:
        await e.start()
    yield made
    for e in made:
        await e.close()


async def run(engine, schema, mode=SpeculationMode.DEFAULT, seed: int | None = None):
    req = GenerationRequest(TextPrompt("Fill in the form:"), stopping=StopOptions(max_tokens=96),
                            response_format=ResponseFormat(FormatKind.JSON_SCHEMA, json.dumps(schema)),
                            speculation=SpeculationOptions(mode),
                            sampling=SamplingOptions(temperature=0.8, seed=seed) if seed is not None else
                            SamplingOptions())
    ids, usage = [], None
    async for ev in engine.generate(req):
        if isinstance(ev, Delta):
            ids += ev.token_ids
        elif isinstance(ev, Finished):
            usage = ev.usage
    return ids, usage


@pytest.mark.parametrize("seed", [None, 7])
async def test_forced_tokens_are_drafted_and_the_output_never_changes(engines, seed):
    on, off = engines
    for schema in SCHEMAS:
        plain, _ = await run(on, schema, SpeculationMode.OFF, seed)
        with_proposals, used = await run(on, schema, SpeculationMode.DEFAULT, seed)
        without, unused = await run(off, schema, SpeculationMode.DEFAULT, seed)
        assert with_proposals == plain == without
        assert used.draft_tokens > unused.draft_tokens and used.accepted_draft_tokens > unused.accepted_draft_tokens


async def test_rows_with_proposals_in_a_mixed_batch_equal_their_solo_outputs(engines):
    on, _ = engines
    solo = [await run(on, s) for s in SCHEMAS]
    free = GenerationRequest(TextPrompt("Once upon a time"), stopping=StopOptions(max_tokens=40))
    free_solo = [t async for t in on.generate(free)]
    mixed = await asyncio.gather(*(run(on, s) for s in SCHEMAS), _collect(on, free), _collect(on, free))
    assert [m[0] for m in mixed[: len(SCHEMAS)]] == [s[0] for s in solo]
    want = [t for ev in free_solo if isinstance(ev, Delta) for t in ev.token_ids]
    assert all(m == want for m in mixed[len(SCHEMAS):])


async def _collect(engine, req) -> list[int]:
    return [t async for ev in engine.generate(req) if isinstance(ev, Delta) for t in ev.token_ids]


async def test_the_capability_says_where_proposals_run(engines):
    on, off = engines
    assert on.describe().capabilities.speculation.grammar_proposals
    assert not off.describe().capabilities.speculation.grammar_proposals


def test_a_long_forced_literal_is_drafted_from_a_prefix(fixture_models):
    """A grammar forcing 70 KB is tokenized only in its first bytes: the drafts are a
    prefix of llguidance's own tokenization of the whole forced text."""
    from llguidance import LLMatcher

    from engine.generation.grammar.compiler import grammar_tokenizer
    from engine.generation.grammar.constraint import Constraint, GrammarStats
    from engine.loading.model import load_generation_model

    m = load_generation_model(str(fixture_models["llama"]))
    tok = grammar_tokenizer(m.tokenizer._tokenizer, m.vocab_size, frozenset(m.eos_ids))
    literal = " ".join(f"word{i}" for i in range(8000))
    matcher = LLMatcher(tok, LLMatcher.grammar_from_lark(f"start: {json.dumps(literal)}\n"), log_level=0)
    whole = matcher.deep_copy().compute_ff_tokens()
    constraint = Constraint(matcher, frozenset(m.eos_ids), GrammarStats(), tok)
    drafts = constraint.forced(16)
    assert 0 < len(drafts) <= 16 and drafts == whole[: len(drafts)]
    assert constraint.valid_prefix(drafts) == len(drafts)
