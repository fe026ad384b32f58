"""The prefix cache's tiers: entries spill to disk, survive a restart and serve the same
tokens as a cold prefill; bad files are deleted, never served; sessions keep their entries
in memory until closed; prefetch brings a disk entry into memory."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache

from engine.caches.disk import DiskTier
from engine.caches.disk_format import SUFFIX, from_host, to_host
from engine.caches.prefix import PrefixCache
from engine.caches.sessions import Sessions
from engine.caches.tier import Tier
from engine.events import Finished, Started
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import GenerationRequest, StopOptions, TokenPrompt

PROMPT = tuple(range(40, 40 + 300))  # long enough for several prefill chunks
KEY = b"k" * 32  # the disk tier's key in tests that make tiers themselves


@pytest.fixture(autouse=True)
def _state_dir(tmp_path_factory, monkeypatch):
    """Engines keep their generated disk-tier key and weight digests in a state directory of the test's own."""
    monkeypatch.setenv("MLX_GRPC_CACHE", str(tmp_path_factory.mktemp("state")))


def _filled(tokens: int, width: int = 64, seed: int = 0) -> list[KVCache]:
    mx.random.seed(seed)
    cache = KVCache()
    cache.update_and_fetch(mx.random.normal((1, 2, tokens, width)), mx.random.normal((1, 2, tokens, width)))
    return [cache]


def _config(directory: Path, **scheduler) -> GenerationConfig:
    return GenerationConfig(scheduler=SchedulerConfig(prefix_cache_dir=str(directory), **scheduler))


async def _run(engine: GenerationEngine, prompt=PROMPT, max_tokens: int = 8, **kw) -> tuple[int, list[int]]:
    started, tokens = None, []
    request = GenerationRequest(prompt=TokenPrompt(tuple(prompt)), stopping=StopOptions(max_tokens=max_tokens), **kw)
    async for event in engine.generate(request):
        if isinstance(event, Started):
            started = event
        elif isinstance(event, Finished):
            break
        else:
            tokens.extend(event.token_ids)
    return started.cached_tokens, tokens


async def _engine(path: Path, config: GenerationConfig, name: str = "m") -> GenerationEngine:
    engine = GenerationEngine(str(path), name=name, config=config)
    await engine.start()
    return engine


# -- the disk tier on its own ----------------------------------------------------------------


def test_an_entry_round_trips_exactly_and_a_restart_finds_it(tmp_path):
    tier = DiskTier(tmp_path, 1 << 30, "fp", KEY)
    caches = _filled(12)
    assert tier.write(to_host(caches, "ns", list(range(12)), "fp"))
    assert tier.drain(10)
    tier.close()
    again = DiskTier(tmp_path, 1 << 30, "fp", KEY)
    found = again.find("ns", list(range(20)))
    assert found is not None and found[1] == 12
    read = from_host(again.read(found[0]))
    assert mx.array_equal(read[0].keys, caches[0].keys).item() and read[0].offset == 12
    assert again.find("other", list(range(20))) is None
    assert again.find("ns", list(range(12)))[1] == 11  # a whole prompt: trimmed, the last token computed
    again.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign", "header", "temp"])
def test_a_bad_file_is_deleted_and_counted_never_served(tmp_path, damage):
    tier = DiskTier(tmp_path, 1 << 30, "fp", KEY)
    tier.write(to_host(_filled(12), "ns", list(range(12)), "fp"))
    tier.drain(10)
    tier.close()
    path = next((tmp_path / "fp").glob("*" + SUFFIX))
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[-5] ^= 0xFF
    elif damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "header":
        raw[20:30] = b"}}}}}}}}}}"
    elif damage == "temp":
        (tmp_path / "fp" / (path.name + ".tmp")).write_bytes(raw[:100])
    if damage == "foreign":
        other = DiskTier(tmp_path / "other", 1 << 30, "fp2", KEY)
        other.write(to_host(_filled(12), "ns", list(range(12)), "fp2"))
        other.drain(10)
        other.close()
        os.replace(next((tmp_path / "other" / "fp2").glob("*" + SUFFIX)), path)
    else:
        path.write_bytes(raw)
    again = DiskTier(tmp_path, 1 << 30, "fp", KEY)
    found = again.find("ns", list(range(20)))
    if damage == "temp":  # the leftover goes, the complete file stays
        assert found is not None and again.read(found[0]) is not None
        assert not list((tmp_path / "fp").glob("*.tmp"))
        return
    if found is not None:  # only the data was damaged: the read finds it
        assert again.read(found[0]) is None
    assert again.corrupt == 1 and len(again) == 0 and not path.exists()
    again.close()


def test_the_tier_stays_within_its_bytes_least_recently_used_first(tmp_path):
    one = to_host(_filled(16), "ns", [0] * 16, "fp").nbytes
    tier = DiskTier(tmp_path, int(3.5 * one), "fp", KEY)
    for first in range(8):
        tier.write(to_host(_filled(16), "ns", [first] + list(range(15)), "fp"))
        tier.drain(10)
        assert tier.nbytes <= tier.max_bytes
    assert len(tier) == 3 and tier.evictions == 5
    on_disk = sum(p.stat().st_size for p in (tmp_path / "fp").iterdir())
    assert on_disk == tier.nbytes
    assert tier.find("ns", [7] + list(range(16))) is not None and tier.find("ns", [0] + list(range(16))) is None
    tier.close()


def test_a_longer_entry_replaces_the_prefixes_it_covers(tmp_path):
    tier = DiskTier(tmp_path, 1 << 30, "fp", KEY)
    tier.write(to_host(_filled(8), "ns", list(range(8)), "fp"))
    tier.drain(10)
    tier.write(to_host(_filled(12), "ns", list(range(12)), "fp"))
    tier.drain(10)
    assert len(tier) == 1 and tier.find("ns", list(range(9)))[1] == 8  # the longer one, trimmed
    tier.close()


# -- the memory tier over it -------------------------------------------------------------------


def test_memory_eviction_spills_and_a_take_reads_it_back(tmp_path):
    tier = DiskTier(tmp_path, 1 << 30, "fp", KEY)
    cache = PrefixCache(1 << 30, max_entries=1, disk=tier, spill_all=False)
    first = _filled(10, seed=1)
    cache.put(list(range(10)), first, "ns")
    assert len(tier) == 0  # only evicted entries go to disk
    cache.put(list(range(100, 110)), _filled(10, seed=2), "ns")
    tier.drain(10)
    assert len(tier) == 1 and len(cache) == 1
    hit = cache.take(list(range(12)), "ns")
    assert hit.tier == "disk" and hit.tokens == list(range(10)) and cache.disk_hits == 1
    assert mx.array_equal(hit.caches[0].keys[..., :10, :], _filled(10, seed=1)[0].keys[..., :10, :]).item()
    tier.close()


def test_open_sessions_are_evicted_last_and_closing_releases_them():
    cache = PrefixCache(1 << 30, max_entries=2, sessions=Sessions(idle_s=0))
    cache.put([1, 2, 3], _filled(3), "ns", session="t\x1fchat")
    cache.put([4, 5, 6], _filled(3), "ns")
    cache.put([7, 8, 9], _filled(3), "ns")  # evicts [4, 5, 6], the oldest outside the session
    assert cache.covered([1, 2, 3, 0], "ns") == 3 and cache.covered([4, 5, 6, 0], "ns") == 0
    assert cache.close_session("t\x1fchat") == 1 and cache.close_session("t\x1fchat") == 0
    cache.put([10, 11, 12], _filled(3), "ns")  # now the session's entry is the oldest
    assert cache.covered([1, 2, 3, 0], "ns") == 0 and cache.covered([7, 8, 9, 0], "ns") == 3


def test_session_entries_stay_pinned_after_the_cache_drops_covered_entries():
    cache = PrefixCache(1 << 30, max_entries=2, sessions=Sessions(idle_s=0))
    cache.put([1, 2], _filled(2), "ns")
    cache.put([1, 2, 3], _filled(3), "ns")  # covers [1, 2]: that entry is dropped
    cache.put([7, 8, 9], _filled(3), "ns", session="t\x1fchat")
    cache.put([4, 5, 6], _filled(3), "ns")
    cache.put([10, 11, 12], _filled(3), "ns")
    assert cache.covered([7, 8, 9, 0], "ns") == 3 and len(cache.sessions) == 1


def test_sessions_close_when_idle():
    now = [0.0]
    sessions = Sessions(idle_s=10, clock=lambda: now[0])
    sessions.touch("s", "k")
    sessions.touch("quiet")  # a session that stored nothing is not kept
    assert sessions.pinned() == {"k"} and len(sessions) == 1
    now[0] = 11
    assert sessions.pinned() == set() and len(sessions) == 0


def test_an_entry_belongs_to_the_last_session_that_stored_it():
    sessions = Sessions(idle_s=0)
    sessions.touch("a", "k")
    sessions.touch("b", "k")
    assert len(sessions) == 1 and sessions.close("a") == 0 and sessions.close("b") == 1


# -- whole engines ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["llama", "sliding", "lfm2"])
async def test_after_a_restart_a_disk_hit_serves_the_cold_prefills_tokens(fixture_models, tmp_path, kind):
    config = _config(tmp_path)
    engine = await _engine(fixture_models[kind], config)
    try:
        cold_cached, cold = await _run(engine, bypass_prefix_cache=True)
        first_cached, first = await _run(engine)
        assert cold_cached == first_cached == 0 and first == cold
    finally:
        await engine.close()  # a clean shutdown lets queued writes land
    assert list((tmp_path).rglob("*" + SUFFIX))
    engine = await _engine(fixture_models[kind], config)
    try:
        cached, again = await _run(engine)
        stats = await engine.stats()
        assert cached >= len(PROMPT) // 2, kind
        assert again == cold, kind
        assert stats.prefix_disk_hits == 1 and stats.prefix_disk.entries >= 1
    finally:
        await engine.close()


async def test_tenants_keep_their_own_entries(fixture_models, tmp_path):
    from engine.tenancy import Tenant

    engine = await _engine(fixture_models["llama"], _config(tmp_path))
    try:
        await _run(engine)
        engine.disk.drain(10)
        cached, _ = await _run(engine, tenant=Tenant(name="other"))
        assert cached == 0  # another tenant never reads the first one's entries
        engine.disk.drain(10)
        tags = {e.namespace for e in engine.disk._index.values()}
        assert len(tags) == 2 and all("other" not in t for t in tags)  # keyed tags, never the names
    finally:
        await engine.close()


async def test_adapter_entries_are_keyed_by_the_adapters_content_not_its_name(fixture_models, fixture_adapters,
                                                                              tmp_path):
    first = dataclasses.replace(_config(tmp_path), adapters=(("tone", str(fixture_adapters["tone"])),))
    engine = await _engine(fixture_models["llama"], first)
    try:
        await _run(engine, adapter="tone")
    finally:
        await engine.close()
    swapped = dataclasses.replace(_config(tmp_path), adapters=(("tone", str(fixture_adapters["small"])),
                                                               ("voice", str(fixture_adapters["tone"]))))
    engine = await _engine(fixture_models["llama"], swapped)
    try:
        cached, _ = await _run(engine, adapter="tone")
        assert cached == 0  # the name came back with other weights
        _, cold = await _run(engine, adapter="voice", bypass_prefix_cache=True)
        cached, warm = await _run(engine, adapter="voice")
        assert cached >= len(PROMPT) // 2 and warm == cold  # the same weights under another name
        fetched = await engine.prefetch(GenerationRequest(prompt=TokenPrompt(PROMPT), adapter="voice"))
        assert fetched.cached_tokens >= len(PROMPT) // 2
    finally:
        await engine.close()


async def test_prefetch_brings_a_disk_entry_into_memory(fixture_models, tmp_path):
    config = _config(tmp_path)
    engine = await _engine(fixture_models["llama"], config)
    try:
        _, cold = await _run(engine, bypass_prefix_cache=True)
        await _run(engine)
    finally:
        await engine.close()
    engine = await _engine(fixture_models["llama"], config)
    try:
        request = GenerationRequest(prompt=TokenPrompt(PROMPT), session_id="s1")
        fetched = await engine.prefetch(request)
        assert fetched.tier is Tier.DISK and fetched.prompt_tokens == len(PROMPT)
        assert fetched.cached_tokens >= len(PROMPT) // 2
        again = await engine.prefetch(request)
        assert again.tier is Tier.MEMORY and again.cached_tokens == fetched.cached_tokens
        cached, tokens = await _run(engine, session_id="s1")
        assert cached == fetched.cached_tokens and tokens == cold
        stats = await engine.stats()
        assert stats.prefix_memory_hits == 1 and stats.open_sessions == 1
        assert await engine.close_session("s1", "") >= 1
        assert await engine.close_session("s1", "") == 0
    finally:
        await engine.close()


async def test_flush_deletes_the_disk_tier_too(fixture_models, tmp_path):
    engine = await _engine(fixture_models["llama"], _config(tmp_path))
    try:
        await _run(engine)
        engine.disk.drain(10)
        assert len(engine.disk) >= 1
        await engine.flush_prefix_cache()
        assert len(engine.disk) == 0 and not list(tmp_path.rglob("*" + SUFFIX))
    finally:
        await engine.close()


async def test_another_model_never_reads_the_entries(fixture_models, tmp_path):
    engine = await _engine(fixture_models["llama"], _config(tmp_path))
    try:
        await _run(engine)
    finally:
        await engine.close()
    other = await _engine(fixture_models["qwen3"], _config(tmp_path))
    try:
        assert other.disk.fingerprint != engine.disk.fingerprint and len(other.disk) == 0
        cached, _ = await _run(other)
        assert cached == 0
    finally:
        await other.close()


async def test_a_disk_hit_is_read_while_other_rows_decode(fixture_models, tmp_path):
    """The engine thread never waits on the disk for a hit: the row reads off-thread while
    a running stream keeps producing tokens, then starts from the entry."""
    config = _config(tmp_path)
    engine = await _engine(fixture_models["llama"], config)
    try:
        _, cold = await _run(engine, bypass_prefix_cache=True)
        await _run(engine)
    finally:
        await engine.close()
    engine = await _engine(fixture_models["llama"], config)
    try:
        reads = []
        original = engine.disk.read

        def slow_read(entry):
            import time

            time.sleep(0.5)  # a slow disk
            reads.append(entry)
            return original(entry)

        engine.disk.read = slow_read
        stamps: list[float] = []

        async def stream():
            import time

            request = GenerationRequest(prompt=TokenPrompt((5, 6, 7)), stopping=StopOptions(max_tokens=4000,
                                                                                           ignore_eos=True))
            async for event in engine.generate(request):
                if not isinstance(event, (Started, Finished)):
                    stamps.append(time.perf_counter())

        background = asyncio.create_task(stream())
        while len(stamps) < 5:
            await asyncio.sleep(0.01)
        import time

        asked = time.perf_counter()
        cached, tokens = await _run(engine)
        answered = time.perf_counter()
        during = [t for t in stamps if asked + 0.1 < t < asked + 0.45]
        background.cancel()
        assert len(reads) == 1 and cached >= len(PROMPT) // 2 and tokens == cold
        assert during, "the stream stalled while the disk tier read"
        assert answered - asked >= 0.5
    finally:
        await engine.close()


def test_find_reads_one_bucket_and_agrees_with_a_scan_of_every_entry(tmp_path):
    import random

    rng = random.Random(3)
    tier = DiskTier(tmp_path, 1 << 30, "fp", KEY)
    stored = []
    for i in range(60):
        base = [rng.randrange(3) for _ in range(rng.randrange(1, 40))]
        ns = rng.choice(["a", "b"])
        stored.append((ns, tuple(base)))
        tier.write(to_host(_filled(len(base), width=32), ns, base, "fp"))
        tier.drain(10)
    entries = [(e.namespace, e.tokens) for e in tier._index.values()]
    untag = {tier.tag(ns): ns for ns in ("a", "b")}
    entries = [(untag[tag], tokens) for tag, tokens in entries]
    for _ in range(300):
        ns = rng.choice(["a", "b"])
        prompt = tuple(rng.randrange(3) for _ in range(rng.randrange(1, 45)))
        best = 0
        for entry_ns, tokens in entries:
            if entry_ns != ns:
                continue
            if len(tokens) < len(prompt) and prompt[: len(tokens)] == tokens:
                best = max(best, len(tokens))
            elif len(tokens) >= len(prompt) and tokens[: len(prompt)] == prompt:
                best = max(best, len(prompt) - 1)
        found = tier.find(ns, prompt)
        assert (found[1] if found else 0) == best, (ns, prompt)
    tier.close()


def test_a_queued_entry_a_later_one_extends_is_not_written(tmp_path):
    tier = DiskTier(tmp_path, 1 << 30, "fp", KEY)
    with tier._lock:  # the writer cannot take either before both are queued
        tier.write(to_host(_filled(8), "ns", list(range(8)), "fp"))
        tier.write(to_host(_filled(12), "ns", list(range(12)), "fp"))
        assert len(tier._pending) == 1
    tier.drain(10)
    assert tier.writes == 1 and len(tier) == 1
    tier.close()


def test_only_the_temporary_files_of_writers_gone_are_deleted(tmp_path):
    (tmp_path / "fp").mkdir()
    live = tmp_path / "fp" / f"abc.safetensors.{os.getppid()}.1.tmp"
    dead = tmp_path / "fp" / f"def.safetensors.{2 ** 22 + 12345}.1.tmp"
    for path in (live, dead):
        path.write_bytes(b"partial")
    DiskTier(tmp_path, 1 << 30, "fp", KEY).close()
    assert live.exists() and not dead.exists()


def test_a_clean_shutdown_does_not_rewrite_what_the_disk_tier_evicted(tmp_path):
    tier = DiskTier(tmp_path, 1 << 30, "fp", KEY)
    cache = PrefixCache(1 << 30, disk=tier, spill_all=True)
    cache.put(list(range(10)), _filled(10), "ns")
    tier.drain(10)
    with tier._lock:
        tier._evict_over(0)  # the disk tier made room since
    cache.persist()
    tier.drain(10)
    assert tier.writes == 1 and len(tier) == 0
    cache.put(list(range(50, 60)), _filled(10), "ns")
    tier.drain(10)
    assert tier.writes == 2
    tier.close()


async def test_tenants_sharing_a_cache_namespace_keep_their_sessions_apart(fixture_models, tmp_path):
    from engine.tenancy import Tenant

    a, b = Tenant(name="a", cache_namespace="shared"), Tenant(name="b", cache_namespace="shared")
    engine = await _engine(fixture_models["llama"], _config(tmp_path))
    try:
        await _run(engine, tenant=a, session_id="s")
        assert await engine.close_session("s", "b") == 0
        cached, _ = await _run(engine, tenant=b)
        assert cached > 0  # the namespace is shared: so are the entries
        assert await engine.close_session("s", "a") >= 1
    finally:
        await engine.close()


async def test_a_short_request_costs_one_disk_write(fixture_models, tmp_path):
    """Stored when it joins the batch and when it finishes: the first write waits long
    enough for the second to replace it."""
    engine = await _engine(fixture_models["llama"], _config(tmp_path))
    try:
        await _run(engine, max_tokens=4)
        await asyncio.sleep(0.1)  # the finished entry is stored just after the last event
        assert engine.disk.drain(10)
        assert engine.disk.writes == 1 and len(engine.disk) == 1
    finally:
        await engine.close()
