"""Shared test data and helpers."""

from __future__ import annotations

import math
import time

import grpc

from mlxgrpc_client import error_details, pb

SIMILAR = ("A man is eating food.", "A man is eating a piece of bread.")
#: Seventy short texts: a packed Embed of them is at most ceil(70 / 64) = 2 messages.
SEVENTY = tuple(f"Note {i}: a short sentence about {topic}." for i, topic in enumerate(
    ["rivers", "bread", "the stock market", "mountains", "music", "a cat", "rain", "trains", "chess", "the sea"] * 7))
UNRELATED = "The stock market crashed today."
#: A prompt and settings that keep a generation running until it is cancelled.
LONG = dict(max_tokens=4000, stopping={"ignore_eos": True})
#: About forty words: a prompt whose prefix the prefix cache keeps after a Generate.
SESSION_PROMPT = ("The old lighthouse keeper climbed the winding stairs every evening at dusk, trimmed the wick, "
                  "polished the great lens and watched the fishing boats return along the rocky coast, writing "
                  "each name in a worn leather logbook that his grandfather had started long ago.")


def over_long(model: pb.ModelInfo) -> str:
    """A text of twice the model's input limit in tokens (a word is at least one), yet well
    within the server's byte limit on an input (32 bytes per token of the limit)."""
    return "word " * (2 * model.context_length)


def cosine(a, b) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def exact(max_tokens: int) -> dict:
    """Generation settings that produce exactly ``max_tokens`` tokens on any model."""
    return dict(max_tokens=max_tokens, stopping={"ignore_eos": True})


def saturate(client, model: str, batch: int = 8, most: int = 256):
    """Opens long generations (raw stub: no retries) until the server refuses one
    with RESOURCE_EXHAUSTED. Returns the calls still running and the refusal."""
    running = []
    while len(running) < most:
        calls = [client.stub.Generate(pb.GenerateRequest(model=model, text="Count:", stopping=pb.StoppingCriteria(
            max_tokens=4000, ignore_eos=True)), metadata=client.metadata) for _ in range(batch)]
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not any(c.done() for c in calls):
            time.sleep(0.05)
        refused = [c for c in calls if c.done() and c.code() == grpc.StatusCode.RESOURCE_EXHAUSTED]
        running += [c for c in calls if not c.done()]
        if refused:
            return running, refused[0]
    release(client, running, model)
    raise AssertionError(f"{most} concurrent generations and no RESOURCE_EXHAUSTED")


def release(client, calls, model: str) -> None:
    """Cancels ``calls`` and waits until the server admits requests again."""
    for call in calls:
        call.cancel()
    probe = pb.GenerateRequest(model=model, text="x", stopping=pb.StoppingCriteria(max_tokens=1))
    for _ in range(300):
        try:
            list(client.stub.Generate(probe, metadata=client.metadata, timeout=30))
            return
        except grpc.RpcError as err:
            if error_details(err).code != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
        time.sleep(0.1)
