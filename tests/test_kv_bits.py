"""Quantized KV (--kv-bits): the kernels against MLX's own ops on the dequantized
arrays, the batch cache against mlx-lm's BatchKVCache on the same (dequantized) rows,
and greedy output against mlx-lm's model with its QuantizedKVCache."""

from __future__ import annotations

import asyncio

import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache, make_prompt_cache

from engine import kernels
from engine.caches.quantized_kv import BatchQuantizedKVCache, QuantizedRowCache, group_for, make_caches
from engine.errors import UnsupportedModel
from engine.events import Finished, Started
from engine.generation.config import GenerationConfig, SchedulerConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import GenerationRequest, StopOptions, TokenPrompt

needs_kernels = pytest.mark.skipif(not kernels.enabled(), reason="the CPU kernels are off or not built")
PROMPTS = [[(7 * i + 3 * j) % 200 + 5 for j in range(n)] for i, n in enumerate((5, 17, 40, 90, 3, 60, 33, 120))]


def _deq(parts, group, bits):
    return mx.dequantize(*parts, group_size=group, bits=bits)


@needs_kernels
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("rows", [1, 4, 40])
def test_quantized_attention_equals_attention_over_the_dequantized_keys(bits, rows):
    ext = kernels.ext()
    q = mx.random.normal((2, 6, rows, 64))
    k, v = mx.random.normal((2, 2, 300, 64)), mx.random.normal((2, 2, 300, 64))
    qk, qv = mx.quantize(k, group_size=32, bits=bits), mx.quantize(v, group_size=32, bits=bits)
    kd, vd = _deq(qk, 32, bits), _deq(qv, 32, bits)
    mask = mx.random.uniform(shape=(2, 1, rows, 250)) > 0.2
    for causal, m, length in ((False, None, -1), (True, None, 250), (False, mask, 250)):
        n = 300 if length < 0 else length
        ref = mx.fast.scaled_dot_product_attention(q, kd[:, :, :n], vd[:, :, :n], scale=0.125,
                                                   mask="causal" if causal else m)
        out = ext.attention_quantized(q, list(qk), list(qv), 32, bits, 0.125, causal, m, False, length)
        assert mx.abs(out - ref).max().item() < 1e-5


@needs_kernels
@pytest.mark.parametrize("bits", [8, 4])
def test_kv_pack_write_quantizes_exactly_as_mlx_and_changes_only_its_rows(bits):
    from engine.caches.quantized_kv import pack

    ext = kernels.ext()
    k = mx.random.normal((2, 5, 3, 64)).transpose(0, 2, 1, 3) * 3  # strided, as attention makes them
    k = mx.concatenate([mx.zeros((2, 3, 1, 64)), k[:, :, 1:]], axis=2)  # a constant group too
    width = 64 * bits // 32 + 4
    buffer = mx.random.randint(0, 1 << 30, (2, 3, 9, width)).astype(mx.uint32)
    held = mx.array(buffer)  # another holder: the write must not change it
    out = ext.kv_pack_write(buffer, k, 3, 32, bits)
    expected = mx.array(held)
    expected[:, :, 3:8] = pack(mx.quantize(k, group_size=32, bits=bits))
    assert mx.array_equal(out, expected).item() and mx.array_equal(buffer, held).item()


def _rows(n, seed):
    mx.random.seed(seed)
    return mx.random.normal((1, 2, n, 64)), mx.random.normal((1, 2, n, 64))


@pytest.mark.parametrize("bits", [8, 4])
def test_the_batch_cache_behaves_as_mlx_lms_on_the_dequantized_rows(bits):
    """merge, decode steps, extend, a ragged step rolled back, filter and extract on
    both: the quantized cache's dequantized keys equal the float cache's."""
    g = group_for(64)
    lengths = (5, 9, 3)
    quant_rows, float_rows = [], []
    for i, n in enumerate(lengths):
        k, v = _rows(n, i)
        row = QuantizedRowCache(bits=bits)
        row.update_and_fetch(k, v)
        quant_rows.append(row)
        flat = KVCache()
        flat.update_and_fetch(_deq(mx.quantize(k, g, bits), g, bits), _deq(mx.quantize(v, g, bits), g, bits))
        float_rows.append(flat)
    qb, fb = BatchQuantizedKVCache.merge(quant_rows[:2]), BatchKVCache.merge(float_rows[:2])

    def same():
        qk, qv = qb.keys_and_values()
        fk, fv = fb.keys_and_values()
        assert mx.array_equal(_deq(qk, g, bits), fk).item() and mx.array_equal(_deq(qv, g, bits), fv).item()
        assert qb.offset.tolist() == fb.offset.tolist() and qb.left_padding.tolist() == fb.left_padding.tolist()

    def step(n, seed):
        k, v = mx.random.normal((qb.offset.shape[0], 2, n, 64)), mx.random.normal((qb.offset.shape[0], 2, n, 64))
        qb.update_and_fetch(k, v)
        fb.update_and_fetch(_deq(mx.quantize(k, g, bits), g, bits), _deq(mx.quantize(v, g, bits), g, bits))

    same()
    step(1, 10)
    same()
    qb.extend(BatchQuantizedKVCache.merge(quant_rows[2:]))
    fb.extend(BatchKVCache.merge(float_rows[2:]))
    same()
    step(3, 11)
    for c in (qb, fb):
        c.prepare(right_padding=[0, 2, 1])
        c.finalize()
    same()
    keep = mx.array([2, 0])
    qb.filter(keep)
    fb.filter(keep)
    same()
    for i in range(2):
        row, flat = qb.extract(i), fb.extract(i)
        assert row.offset == flat.offset
        assert mx.array_equal(_deq(row.keys_and_values()[0], g, bits), flat.keys_and_values()[0]).item()
    assert qb.trim(2) == fb.trim(2)
    same()


def _reference(model_dir, prompt, n, bits):
    """mlx-lm's model with its QuantizedKVCache on every plain KV layer, greedy."""
    model, _ = mlx_lm.load(str(model_dir))
    caches = [QuantizedKVCache(group_size=0, bits=bits) if type(c) is KVCache else c for c in make_prompt_cache(model)]
    for c in caches:
        if isinstance(c, QuantizedKVCache):
            c.group_size = group_for(model.args.hidden_size // model.args.num_attention_heads
                                     if not getattr(model.args, "head_dim", None) else model.args.head_dim)
    tokens, margins, feed = [], [], mx.array([prompt])
    for _ in range(n):
        logits = model(feed, cache=caches)[0, -1]
        top = mx.sort(logits)[-2:].tolist()
        tokens.append(int(mx.argmax(logits).item()))
        margins.append(top[1] - top[0])
        feed = mx.array([[tokens[-1]]])
    return tokens, margins


async def _generate(engine, prompt, n):
    out = []
    async for event in engine.generate(GenerationRequest(prompt=TokenPrompt(tuple(prompt)),
                                                         stopping=StopOptions(max_tokens=n, ignore_eos=True))):
        if isinstance(event, Finished):
            break
        if not isinstance(event, Started):
            out.extend(event.token_ids)
    return out


def _agrees(ours, reference, margins):
    for i, (a, b) in enumerate(zip(ours, reference)):
        if a != b:
            return margins[i] < 1e-4  # a near tie: the rest may differ
    return len(ours) == len(reference)


@pytest.mark.parametrize("kind", ["qwen3"])  # head size 32 (llama and lfm2 have 16: refused below)
@pytest.mark.parametrize("bits", [8, 4])
async def test_greedy_output_equals_mlx_lm_with_its_quantized_cache_alone_and_in_a_batch(fixture_models, kind,
                                                                                           bits):
    config = GenerationConfig(scheduler=SchedulerConfig(kv_bits=bits, prefill_chunk=32, prefill_batch=4))
    engine = GenerationEngine(str(fixture_models[kind]), name=kind, config=config)
    await engine.start()
    try:
        alone = [await _generate(engine, p, 12) for p in PROMPTS[:3]]
        together = await asyncio.gather(*(_generate(engine, p, 12) for p in PROMPTS))
        again = await _generate(engine, PROMPTS[2], 12)  # a prefix-cache hit on quantized state
        stats = await engine.stats()
    finally:
        await engine.close()
    for prompt, mine, batched in zip(PROMPTS, alone, together):
        reference, margins = _reference(fixture_models[kind], prompt, 12, bits)
        assert _agrees(mine, reference, margins), (kind, prompt)
        assert _agrees(batched, reference, margins), (kind, prompt)
    assert again == alone[2] and stats.prefix_hits >= 1


async def test_the_memory_plan_counts_the_quantized_bytes_and_model_info_names_them(fixture_models):
    sizes, named = {}, {}
    for bits in (0, 8, 4):
        engine = GenerationEngine(str(fixture_models["qwen3"]), name="qwen3",
                                  config=GenerationConfig(scheduler=SchedulerConfig(kv_bits=bits)))
        await engine.start()
        sizes[bits] = engine.kv_bytes_per_token
        named[bits] = engine.describe().kv_cache_dtype
        await engine.close()
    assert named == {0: "float32", 8: "int8", 4: "int4"}
    # float32 KV: 4 bytes an element; in groups of 32, 8 bits: 1 + 8 / 32; 4 bits: 0.5 + 8 / 32
    assert sizes[0] / sizes[8] == pytest.approx(4 / 1.25) and sizes[0] / sizes[4] == pytest.approx(4 / 0.75)


async def test_a_head_size_no_group_divides_is_refused_at_start(fixture_models):
    from engine.caches.quantized_kv import check_kv_bits

    model, _ = mlx_lm.load(str(fixture_models["llama"]))
    with pytest.raises(UnsupportedModel, match="--kv-bits"):
        check_kv_bits(model, 3, "llama")
    assert make_caches(model, 0) and all(type(c) is QuantizedRowCache for c in make_caches(model, 8))
    engine = GenerationEngine(str(fixture_models["llama"]), name="llama",
                              config=GenerationConfig(scheduler=SchedulerConfig(kv_bits=8)))
    with pytest.raises(UnsupportedModel, match="head size 16 is not a multiple of 32"):
        await engine.start()
    await engine.close()
