"""Every thread that runs MLX work releases its streams as its last step (MLX tears
thread-local streams down only as a thread exits, which can race the interpreter's
exit and abort the process): the hosts engine threads run on (when the process stops
them), the disk tier's writer and reader, and adapter reads. A host is reused by the
next engine, so loading and unloading models leaves no thread behind."""

from __future__ import annotations

import os
import threading

import mlx.core as mx
import pytest

import engine.adapters.reads as reads
import engine.caches.disk as disk
import engine.serving.hosts as hosts
from engine.embedding.engine import EmbeddingEngine
from engine.events import Finished
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.hardware.device import end_thread
from engine.preparation import Preparation
from engine.requests import EmbeddingRequest, GenerationRequest, StopOptions, TokenPrompt


@pytest.fixture
def ended(monkeypatch) -> list[str]:
    """Names of the threads that called ``end_thread``, in order."""
    names: list[str] = []

    def recording() -> None:
        names.append(threading.current_thread().name)
        end_thread()

    for module in (hosts, disk, reads):  # every engine thread, embeddings' too, runs on a host
        monkeypatch.setattr(module, "end_thread", recording)
    return names


async def test_generation_thread_and_disk_tier_release_their_streams(fixture_models, tmp_path, ended):
    config = GenerationConfig(scheduler=SchedulerConfig(prefix_cache_dir=str(tmp_path)))
    engine = GenerationEngine(str(fixture_models["llama"]), name="ending", config=config)
    await engine.start()
    request = GenerationRequest(prompt=TokenPrompt(tuple(range(40, 140))), stopping=StopOptions(max_tokens=4))
    async for event in engine.generate(request):
        if isinstance(event, Finished):
            break
    await engine.close()
    assert hosts.stop_idle() >= 1 and hosts.IDLE_NAME in ended  # its host, once stopped
    assert any(name.startswith("prefix-disk-") and "read" not in name for name in ended)
    assert any(name.startswith("prefix-disk-read-") for name in ended)
    assert threading.current_thread().name not in ended


async def test_embedding_thread_releases_its_streams(fixture_models, ended):
    engine = EmbeddingEngine(fixture_models["qwen3"], name="ending-embed")
    await engine.start()
    results = [r async for r in engine.embed(EmbeddingRequest(inputs=("one", "two")))]
    await engine.close()
    assert len(results) == 2
    assert hosts.stop_idle() >= 1 and hosts.IDLE_NAME in ended, ended


async def test_the_next_engine_runs_on_the_host_the_last_one_left(fixture_models):
    seen: list[str] = []
    preparation = Preparation()  # shared, as a ModelSet shares one among its engines
    for _ in range(3):
        engine = GenerationEngine(str(fixture_models["llama"]), name="hosted")
        engine.preparation = preparation
        await engine.start()
        request = GenerationRequest(prompt=TokenPrompt(tuple(range(40, 60))), stopping=StopOptions(max_tokens=2))
        assert [e async for e in engine.generate(request) if isinstance(e, Finished)]
        await engine.close()
        hosts_now = sorted(t.name for t in threading.enumerate() if t.name.startswith("engine-"))
        native = len(os.listdir("/proc/self/task")) - threading.active_count()  # not Python's (pools grow lazily)
        seen.append(f"{','.join(hosts_now)} / {native} native threads")
    assert seen[0].split(" / ")[0] == seen[1].split(" / ")[0] == seen[2].split(" / ")[0]  # no host more
    assert seen[1] == seen[2]  # nor a native thread (MLX's and the BLAS's stay with their host)
    preparation.close()


async def test_adapter_read_thread_releases_its_streams(ended):
    def work() -> float:
        return (mx.ones(4) * 2).sum().item()

    assert await reads.Reads().run(work) == 8.0
    assert ended == ["adapter-read"]
