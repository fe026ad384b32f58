"""Gemma 2's sliding window, which mlx-lm's gemma2 leaves out (engine/loading/windows.py):
on a fixture with a window of WINDOW positions, the first WINDOW positions compute
exactly as mlx-lm's stock model and later ones differ from it; the local layers hold a
rotating cache of the window; and greedy output served by the engine (kernels, chunked
prefill across the window, a batch, prefix-cache hits) equals a full forward over the
whole sequence with the window's mask on the even layers, recomputed at every step (no
cache), token for token or at a tie."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx_lm
import pytest

from tests.fixtures.gguf_models import gemma2_fixture
from tests.gguf_reference import served_greedy
from tests.test_kernels_models import assert_same_or_tie

WINDOW = 8
TOKENS = 12


@pytest.fixture(scope="module")
def gemma2_dir(tmp_path_factory):
    path = gemma2_fixture(tmp_path_factory.mktemp("gemma2-window") / "gemma2")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "sliding_window": WINDOW}))
    return path


@pytest.fixture(scope="module")
def windowed(gemma2_dir):
    from engine.loading.model import load_generation_model

    return load_generation_model(gemma2_dir, use_kernels=False)


def prompts(tokenizer) -> list[list[int]]:
    texts = ["The lighthouse keeper counted the boats in the harbour every evening before supper.",
             "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15", "Hello there, how are you doing today my friend?"]
    return [tokenizer.encode(text) for text in texts]


def full_greedy(model, ids: list[int], n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(int(mx.argmax(model(mx.array([ids + out]))[0, -1]).item()))
    return out


def test_within_the_window_mlx_lm_s_own_output_and_past_it_the_window(gemma2_dir, windowed):
    stock, _ = mlx_lm.load(str(gemma2_dir))
    ids = prompts(windowed.tokenizer)[0]
    assert len(ids) > 3 * WINDOW
    mine, theirs = windowed.model(mx.array([ids])), stock(mx.array([ids]))
    assert mx.abs(mine[:, :WINDOW] - theirs[:, :WINDOW]).max().item() < 1e-5
    assert mx.abs(mine[:, WINDOW + 1:] - theirs[:, WINDOW + 1:]).max().item() > 1e-2


def test_the_local_layers_hold_a_rotating_cache_of_the_window(windowed):
    from mlx_lm.models.cache import KVCache, RotatingKVCache, make_prompt_cache

    caches = make_prompt_cache(windowed.model)
    assert [type(c) for c in caches] == [RotatingKVCache if i % 2 == 0 else KVCache for i in range(len(caches))]
    assert all(c.max_size == WINDOW for c in caches[::2])


def test_served_greedy_equals_a_full_forward_with_the_window(gemma2_dir, windowed):
    from engine.generation.config import SchedulerConfig

    ids = prompts(windowed.tokenizer)
    got = served_greedy(gemma2_dir, "gemma2", ids, TOKENS,
                        SchedulerConfig(max_active=4, prefill_chunk=6, tick_tokens=12, min_prefill_tokens=3))
    for prompt, tokens in zip(ids, got):
        assert_same_or_tie(windowed.model, prompt, full_greedy(windowed.model, prompt, TOKENS), tokens, "gemma2")
