"""A generation request crosses into the engine thread as a ``CoreRequest`` (plain data);
the thread builds its sequences, and a request it cannot build ends alone: its caller gets
an error, the thread and every other request serve on."""

from __future__ import annotations

import dataclasses

import pytest

import engine.generation.core.request as core_request
from engine.errors import EngineFailure
from engine.events import Finished, FinishReason
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import GenerationRequest, SamplingOptions, StopOptions, TokenPrompt

POISON = 4242  # the seed whose build fails


async def test_a_request_the_thread_cannot_build_ends_alone(fixture_models, monkeypatch):
    engine = GenerationEngine(str(fixture_models["llama"]), name="build-fault")
    await engine.start()
    real = core_request.SamplingState

    def faulty(options, prompt, tokens):
        if options.seed == POISON:
            raise RuntimeError("a fault while building")
        return real(options, prompt, tokens)

    monkeypatch.setattr(core_request, "SamplingState", faulty)
    try:
        request = GenerationRequest(TokenPrompt(tuple(range(40, 60))), stopping=StopOptions(max_tokens=4))
        with pytest.raises(EngineFailure):
            async for _ in engine.generate(dataclasses.replace(request, sampling=SamplingOptions(seed=POISON), n=2)):
                pass
        events = [e async for e in engine.generate(request)]
        assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.LENGTH
        assert engine.ready
        stats = await engine.stats()
        assert (stats.in_flight, stats.tracked) == (0, 0)  # the failed request left no count behind
    finally:
        await engine.close()

