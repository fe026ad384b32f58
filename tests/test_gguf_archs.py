"""GGUF files of phi3, granite, gemma2, gemma3, qwen3moe, olmo2, starcoder2 and exaone, written from
their fixtures as llama.cpp's converter lays them out (fused phi3 tensors, granite's permuted q/k and
multipliers, Gemma's norm + 1 and soft-capping, OLMo 2's post-norms, StarCoder2's biases and
LayerNorms, EXAONE's GPT-2-style names), loaded through names and config derived from gguf's and
mlx-lm's tables: an F32 file serves exactly the fixture it came
from; Q8_0 and Q4_0 files equal mlx-lm on the same weights dequantized by ``gguf``;
what cannot be served (Phi-3 LongRoPE) is refused by name."""

from __future__ import annotations

import json

import gguf
import mlx.core as mx
import mlx_lm
import numpy as np
import pytest

from engine.errors import UnsupportedModel
from engine.loading.gguf import prepare_gguf
from engine.loading.model import load_generation_model
from tests.fixtures.gguf_models import (GRANITE_MULTIPLIERS, gemma2_fixture, gemma3_fixture, granite_fixture,
                                        phi3_fixture, qwen3moe_fixture)
from tests.fixtures.gguf_derived_models import exaone_fixture, olmo2_fixture, starcoder2_fixture
from tests.gguf_reference import float_reference, served_greedy
from tests.gguf_writer import GGUF_ARCH, write_gguf
from tests.oracle import ORACLE_PROMPTS
from tests.test_kernels_models import assert_same_or_tie, greedy

Q = gguf.GGMLQuantizationType
TOKENS = 12
PROMPTS = {name: ORACLE_PROMPTS[name] for name in ("short", "long", "unicode")}
FIXTURES = {"phi3": phi3_fixture, "granite": granite_fixture, "gemma2": gemma2_fixture, "gemma3": gemma3_fixture,
            "qwen3moe": qwen3moe_fixture, "olmo2": olmo2_fixture, "starcoder2": starcoder2_fixture,
            "exaone": exaone_fixture}
MODEL_TYPE = {arch: model_type for model_type, arch in GGUF_ARCH.items()}  # where they differ


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf-arch-sources")
    cache: dict = {}

    def source(arch: str):
        if arch not in cache:
            cache[arch] = FIXTURES[arch](root / arch)
        return cache[arch]

    return source


@pytest.fixture(scope="module")
def made(sources, tmp_path_factory):
    """(arch, qtype) -> (gguf file, converted directory, float reference directory)."""
    root = tmp_path_factory.mktemp("gguf-arch-files")
    cache: dict = {}

    def make(arch: str, qtype: Q):
        if (arch, qtype) not in cache:
            path = write_gguf(sources(arch), root / f"{arch}.{qtype.name}.gguf", qtype)
            converted = prepare_gguf(path, root / "cache")
            cache[arch, qtype] = (path, converted, float_reference(path, converted, root / f"{path.stem}-f32"))
        return cache[arch, qtype]

    return make


@pytest.mark.parametrize("arch", list(FIXTURES))
def test_an_f32_file_serves_the_fixture_it_came_from(sources, made, arch):
    _, converted, _ = made(arch, Q.F32)
    stock, tokenizer = mlx_lm.load(str(sources(arch)))
    served = load_generation_model(converted)
    assert served.config["model_type"] == MODEL_TYPE.get(arch, arch)
    for name, text in PROMPTS.items():
        ids = tokenizer.encode(text)
        assert tokenizer.encode(text) == served.tokenizer.encode(text)
        assert_same_or_tie(stock, ids, greedy(stock, ids, TOKENS), greedy(served.model, ids, TOKENS), name)
    # Greedy tokens cannot see a monotone change of the logits (granite's scaling, Gemma's cap).
    ids = mx.array([tokenizer.encode(PROMPTS["short"])])
    np.testing.assert_allclose(np.array(served.model(ids)[0, -1]), np.array(stock(ids)[0, -1]), rtol=1e-3, atol=1e-3)


CASES = [(arch, qtype) for arch in FIXTURES for qtype in (Q.Q8_0, Q.Q4_0)]


@pytest.mark.parametrize("arch, qtype", CASES, ids=[f"{a}-{q.name}" for a, q in CASES])
def test_greedy_equals_mlx_lm_on_the_dequantized_file(made, arch, qtype):
    _, converted, reference = made(arch, qtype)
    stock, tokenizer = mlx_lm.load(str(reference))
    served = load_generation_model(converted)
    assert served.dtype.split(" ")[0] in ("q4", "q8", "q4/q8"), served.dtype
    for name, text in PROMPTS.items():
        ids = tokenizer.encode(text)
        assert_same_or_tie(stock, ids, greedy(stock, ids, TOKENS), greedy(served.model, ids, TOKENS),
                           f"{arch}-{qtype.name}/{name}")


def test_the_config_carries_each_architectures_keys(made):
    configs = {arch: json.loads((made(arch, Q.F32)[1] / "config.json").read_text()) for arch in FIXTURES}
    assert configs["phi3"]["partial_rotary_factor"] == 1.0 and configs["phi3"]["sliding_window"] == 2047
    assert {k: configs["granite"][k] for k in GRANITE_MULTIPLIERS} == pytest.approx(GRANITE_MULTIPLIERS)
    gemma = configs["gemma2"]
    assert (gemma["head_dim"], gemma["query_pre_attn_scalar"], gemma["tie_word_embeddings"]) == (32, 32, True)
    assert (gemma["attn_logit_softcapping"], gemma["final_logit_softcapping"]) == (50.0, 30.0)


def test_gemma2_norms_come_back_without_the_converters_one(sources, made):
    from safetensors.numpy import load_file

    fixture = load_file(str(sources("gemma2") / "model.safetensors"))
    converted = mx.load(str(made("gemma2", Q.F32)[1] / "model.safetensors"))
    for name in [n for n in fixture if "norm" in n]:
        np.testing.assert_array_equal(np.array(converted[name]), fixture[name])


def test_a_phi3_longrope_file_is_refused_by_name(sources, tmp_path):
    factors = np.ones(8, dtype=np.float32)
    path = write_gguf(sources("phi3"), tmp_path / "m.gguf", Q.F32,
                      extra_tensors={"rope_factors_long.weight": factors, "rope_factors_short.weight": factors})
    with pytest.raises(UnsupportedModel, match="rope_factors_long"):
        prepare_gguf(path, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/model.safetensors"))


def _meta(arch: str, layers: int, **keys) -> dict:
    meta = {"general.architecture": arch, "tokenizer.ggml.tokens": ["a"] * 8, f"{arch}.block_count": layers,
            f"{arch}.embedding_length": 4608, f"{arch}.attention.head_count": 32, f"{arch}.context_length": 8192,
            f"{arch}.feed_forward_length": 1024, f"{arch}.attention.layer_norm_rms_epsilon": 1e-6}
    meta.update({f"{arch}.{k.replace('__', '.')}": v for k, v in keys.items()})
    return meta


def test_gemma2_query_scale_follows_llama_cpp_by_model_size():
    from engine.loading.gguf_config import build_config

    small = build_config(_meta("gemma2", 42, attention__key_length=128), {"token_embd.weight"})
    large = build_config(_meta("gemma2", 46, attention__key_length=128), {"token_embd.weight"})
    assert (small["query_pre_attn_scalar"], large["query_pre_attn_scalar"]) == (128, 144)


def test_phi3_partial_rotary_comes_from_the_rope_dimensions():
    from engine.loading.gguf_config import build_config

    config = build_config(_meta("phi3", 2, rope__dimension_count=72), {"output.weight"})
    assert config["head_dim"] == 144 and config["partial_rotary_factor"] == 0.5


@pytest.mark.parametrize("arch", list(FIXTURES))
def test_engine_batch_of_8_with_prefix_cache_equals_the_reference(made, arch):
    """Served by the engine (kernels, continuous batching, chunked prefill, the prefix cache):
    eight prompts at once, then again as prefix-cache hits, each equal to mlx-lm's greedy
    output on the gguf-dequantized weights."""
    from engine.generation.config import SchedulerConfig

    _, converted, reference = made(arch, Q.Q4_0)
    stock, tokenizer = mlx_lm.load(str(reference))
    prompts = [tokenizer.encode(text) for text in ORACLE_PROMPTS.values()]
    got = served_greedy(converted, arch, prompts, TOKENS,
                        SchedulerConfig(max_active=8, prefill_chunk=8, tick_tokens=24, min_prefill_tokens=4))
    for (name, _), ids, tokens in zip(ORACLE_PROMPTS.items(), prompts, got):
        assert_same_or_tie(stock, ids, greedy(stock, ids, TOKENS), tokens, f"{arch}/{name}")
