"""Checks for the locally generated test models in tests/fixtures/models.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import mlx_lm
import pytest
from mlx_lm.generate import batch_generate
from mlx_lm.models.cache import RotatingKVCache, make_prompt_cache

from tests.fixtures.models import KINDS, SLIDING_WINDOW, build_all, build_model

PROMPTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog and then",
    "Once upon a time, in a small village by the sea, there lived an old "
    "fisherman and his wife. Every morning he went down",
    "日本語 café 123 😀",
]


@pytest.fixture(scope="module")
def model_paths(tmp_path_factory) -> dict[str, Path]:
    return build_all(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def loaded(model_paths):
    cache = {}

    def get(kind):
        if kind not in cache:
            cache[kind] = mlx_lm.load(str(model_paths[kind]))
        return cache[kind]

    return get


def _greedy_tokens(model, tokenizer, prompt_ids, n):
    return [
        r.token
        for r in mlx_lm.stream_generate(model, tokenizer, prompt_ids, max_tokens=n)
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_layout(model_paths, kind):
    path = model_paths[kind]
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ):
        assert (path / name).is_file(), name
    config = json.loads((path / "config.json").read_text())
    tokenizer = json.loads((path / "tokenizer.json").read_text())
    n_tokens = len(tokenizer["model"]["vocab"])
    assert config["vocab_size"] >= n_tokens


@pytest.mark.parametrize("kind", KINDS)
def test_generate_full_length(loaded, kind):
    model, tokenizer = loaded(kind)
    text = mlx_lm.generate(model, tokenizer, PROMPTS[1], max_tokens=24)
    assert isinstance(text, str) and text

    responses = list(mlx_lm.stream_generate(model, tokenizer, PROMPTS[1], max_tokens=24))
    assert len(responses) == 24
    assert responses[-1].finish_reason == "length"
    tokens = [r.token for r in responses]
    assert not set(tokens) & set(tokenizer.eos_token_ids)
    assert len(set(tokens)) > 8, "greedy output degenerated"
    # Generated tokens decode to clean text, the same whether streamed or not
    # (mlx-lm's BPEStreamingDetokenizer drops one leading space of the output).
    decoded = tokenizer.decode(tokens)
    assert "\ufffd" not in decoded
    streamed = "".join(r.text for r in responses)
    assert streamed in (decoded, decoded.removeprefix(" "))


@pytest.mark.parametrize("kind", KINDS)
def test_batched_matches_single(loaded, kind):
    """mlx-lm's own batched greedy decoding (left padding, BatchKVCache /
    BatchRotatingKVCache) reproduces single-prompt decoding exactly."""
    model, tokenizer = loaded(kind)
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    single = [_greedy_tokens(model, tokenizer, p, 24) for p in prompts]
    batched = batch_generate(
        model, tokenizer, prompts, max_tokens=24, return_token_ids=True
    ).token_ids
    assert batched == single


def test_sliding_uses_rotating_cache(loaded):
    model, tokenizer = loaded("sliding")
    cache = make_prompt_cache(model)
    rotating = [c for c in cache if isinstance(c, RotatingKVCache)]
    assert rotating and len(rotating) < len(cache)
    assert all(c.max_size == SLIDING_WINDOW for c in rotating)
    # A prompt longer than the window wraps the rotating buffer.
    assert len(tokenizer.encode(PROMPTS[2])) > 2 * SLIDING_WINDOW


@pytest.mark.parametrize("kind", KINDS)
def test_tokenizer_round_trip(loaded, kind):
    _, tokenizer = loaded(kind)
    for text in ("Hello, café 日本語 123", "naïve 😀 tabs\tand\nnewlines  ok"):
        assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.mark.parametrize("kind", KINDS)
def test_chat_template(loaded, kind):
    _, tokenizer = loaded(kind)
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi!"},
    ]
    prompt = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    assert prompt == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tokenizer.encode(prompt)
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3
    assert tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer.bos_token is None


def test_build_is_deterministic(tmp_path):
    def digest(path):
        return {
            f.name: hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(path.iterdir())
        }

    a = build_model("qwen3", tmp_path / "a")
    b = build_model("qwen3", tmp_path / "b")
    c = build_model("qwen3", tmp_path / "c", seed=1)
    assert digest(a) == digest(b)
    assert digest(a)["model.safetensors"] != digest(c)["model.safetensors"]
    assert digest(a)["tokenizer.json"] == digest(c)["tokenizer.json"]
