"""Prefetch, CloseSession and the disk tier through the API: the session server (memory
tier) and servers of their own started on a cache directory, restarted, and killed
with SIGKILL in the middle of writes."""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import grpc
import pytest

from engine.caches.disk_format import SUFFIX, read_entry
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.cluster import Replica
from tests.helpers import details, generate, request

PROMPT = ("The lighthouse keeper wrote down every ship that passed the point, its flag, its cargo "
          "and the hour, and in winter he wrote down the storms as well. ") * 3


async def test_prefetch_finds_a_stored_prompt_in_memory_and_close_session_releases_it(stub):
    first = await generate(stub, request(PROMPT, max_tokens=4, session_id="tiers-a"))
    fetched = await stub.Prefetch(pb.PrefetchRequest(text=PROMPT, session_id="tiers-a"))
    assert fetched.tier == pb.CACHE_TIER_MEMORY
    assert 0 < fetched.cached_tokens <= fetched.prompt_tokens - 1
    assert fetched.prompt_tokens == first.started.prompt_tokens
    load = (await stub.GetLoad(pb.GetLoadRequest(model="llama"))).models[0]
    assert load.open_sessions >= 1 and load.prefix_cache_memory_hits >= 0
    assert (await stub.CloseSession(pb.CloseSessionRequest(session_id="tiers-a"))).entries >= 1
    assert (await stub.CloseSession(pb.CloseSessionRequest(session_id="tiers-a"))).entries == 0
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"))).info
    assert info.kv_cache_dtype == "float32"
    unknown = await stub.Prefetch(pb.PrefetchRequest(text="Nothing like this was ever stored here, surely."))
    assert unknown.tier == pb.CACHE_TIER_UNSPECIFIED and unknown.cached_tokens == 0


@pytest.mark.parametrize("call, code, field", [
    (pb.PrefetchRequest(), grpc.StatusCode.INVALID_ARGUMENT, "prompt"),
    (pb.PrefetchRequest(text="Hi", session_id="s" * 200), grpc.StatusCode.INVALID_ARGUMENT, "session_id"),
    (pb.PrefetchRequest(text="Hi", adapter="no-such-adapter"), grpc.StatusCode.NOT_FOUND, None),
    (pb.PrefetchRequest(text="Hi", model="no-such-model"), grpc.StatusCode.NOT_FOUND, None),
    (pb.PrefetchRequest(tokens=gen_pb.TokenIds(ids=[1, 10**9])), grpc.StatusCode.INVALID_ARGUMENT, "tokens.ids"),
    (pb.CloseSessionRequest(), grpc.StatusCode.INVALID_ARGUMENT, "session_id"),
])
async def test_bad_requests_are_refused_with_the_field(stub, call, code, field):
    method = stub.Prefetch if isinstance(call, pb.PrefetchRequest) else stub.CloseSession
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await method(call)
    assert err.value.code() == code
    if field is not None:
        assert field in str(details(err.value)), details(err.value)


def _ids(replica: Replica, n: int, salt: int) -> list[int]:
    return [(salt * 7919 + i * 31) % 400 + 20 for i in range(n)]


def _generate(replica: Replica, ids: list[int], **kw) -> tuple[int, list[int]]:
    started, tokens = 0, []
    for event in replica.stub.Generate(pb.GenerateRequest(
            tokens=gen_pb.TokenIds(ids=ids), stopping=gen_pb.StoppingCriteria(max_tokens=6), **kw), timeout=60):
        if event.HasField("started"):
            started = event.started.cached_tokens
        tokens.extend(event.delta.token_ids)
    return started, tokens


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "prefix-cache"


def _key(tmp_path) -> bytes:
    """The disk tier's key, in a file beside (never inside) the cache directory."""
    path = tmp_path / "prefix-cache.key"
    if not path.exists():
        path.write_bytes(bytes(range(32)))
    return path.read_bytes()


def _replica(fixture_models, tmp_path, cache_dir, name: str) -> Replica:
    _key(tmp_path)
    replica = Replica(name, fixture_models["llama"], tmp_path, "--prefix-cache-dir", str(cache_dir),
                      "--prefix-cache-disk-bytes", str(64 << 20),
                      "--prefix-cache-key-file", str(tmp_path / "prefix-cache.key"))
    replica.wait_until(replica.serving, 120, "serving")
    return replica


def test_a_restarted_server_serves_its_disk_tier_with_the_same_tokens(fixture_models, tmp_path, cache_dir):
    ids = _ids(None, 300, 1)
    replica = _replica(fixture_models, tmp_path, cache_dir, "tiers-1")
    try:
        _, cold = _generate(replica, ids, bypass_prefix_cache=True)
        _generate(replica, ids)
    finally:
        replica.stop()
    replica = _replica(fixture_models, tmp_path, cache_dir, "tiers-2")
    try:
        before = replica.load()
        assert before.prefix_cache_disk_entries >= 1 and before.prefix_cache_disk_bytes > 0
        fetched = replica.stub.Prefetch(pb.PrefetchRequest(tokens=gen_pb.TokenIds(ids=ids)), timeout=30)
        assert fetched.tier == pb.CACHE_TIER_DISK and fetched.cached_tokens >= 250
        cached, warm = _generate(replica, ids)
        assert cached == fetched.cached_tokens and warm == cold
        after = replica.load()
        assert after.prefix_cache_disk_hits == 1 and after.prefix_cache_memory_hits == 1
        metrics = replica.metrics()
        assert 'mlxgrpc_prefix_cache_tier_hits_total{model="llama",tier="disk"} 1.0' in metrics
    finally:
        replica.stop()


@pytest.mark.plumbing  # the disk tier's files, not numerics
def test_sigkill_during_writes_never_leaves_a_served_corrupt_entry(fixture_models, tmp_path, cache_dir):
    """Three times: requests storing distinct prompts, SIGKILL while writes are under way;
    every file the next start keeps is complete, and a hit equals a cold prefill."""
    salt = 0
    for round_ in range(3):
        replica = _replica(fixture_models, tmp_path, cache_dir, f"kill-{round_}")
        pool = ThreadPoolExecutor(6)
        try:
            _generate(replica, _ids(replica, 200, salt))  # one complete entry at least, once written
            replica.wait_until(lambda: replica.load().prefix_cache_disk_writes >= 1, 30, "a disk write")
            calls = [pool.submit(_generate, replica, _ids(replica, 200, salt + i)) for i in range(1, 7)]
            salt += 7
            wait(calls, return_when=FIRST_COMPLETED)  # the others are prefilling, decoding or writing
        finally:
            replica.kill()
            pool.shutdown(wait=True, cancel_futures=True)
        replica = _replica(fixture_models, tmp_path, cache_dir, f"after-kill-{round_}")
        try:
            load = replica.load()
            files = list(cache_dir.rglob("*" + SUFFIX))
            assert len(files) == load.prefix_cache_disk_entries
            assert not list(cache_dir.rglob("*.tmp"))
            for path in files:
                read_entry(path, _key(tmp_path))  # complete and its MACs hold, or this raises
            ids = _ids(replica, 200, salt - 7)
            cached, warm = _generate(replica, ids)
            _, cold = _generate(replica, ids, bypass_prefix_cache=True)
            assert cached > 0 and warm == cold
        finally:
            replica.stop()
