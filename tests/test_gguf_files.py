"""GGUF files of every served architecture and tensor type, written from the fixture
models with ``gguf``'s writer, served from their own bits: greedy output through
the kernels equals mlx-lm on the same weights dequantized by ``gguf``'s own
dequantizer (ties within 1e-4 excepted, as in test_kernels_models); an F32 file
equals the fixture it came from; what cannot be served is refused by name."""

from __future__ import annotations

import dataclasses
import json

import gguf
import mlx.core as mx
import mlx_lm
import numpy as np
import pytest

from engine.errors import UnsupportedModel
from engine.loading.gguf import prepare_gguf
from engine.loading.model import load_generation_model
from tests.fixtures.models import SPECS, build_model
from tests.gguf_reference import float_reference
from tests.gguf_writer import write_gguf
from tests.oracle import ORACLE_PROMPTS
from tests.test_kernels_models import assert_same_or_tie, greedy

Q = gguf.GGMLQuantizationType
TOKENS = 12
PROMPTS = {name: ORACLE_PROMPTS[name] for name in ("short", "long", "unicode")}
# Layers 256 wide: K-quant super-blocks are 256 elements long.
WIDE = dataclasses.replace(SPECS["llama"], hidden_size=256, intermediate_size=512, head_dim=64)
LLAMA3 = dataclasses.replace(SPECS["llama"], extra_config={"rope_scaling": {
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192}})


def qwen2_fixture(path):
    """The llama fixture as Qwen2: the same layers plus q/k/v biases (small, random)."""
    from safetensors.numpy import load_file, save_file

    build_model("llama", path, spec=dataclasses.replace(SPECS["llama"], model_type="qwen2"))
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["Qwen2ForCausalLM"]
    (path / "config.json").write_text(json.dumps(config))
    weights = load_file(str(path / "model.safetensors"))
    rng = np.random.default_rng(3)
    for name in [n for n in weights if n.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight"))]:
        rows = weights[name].shape[0]
        weights[name.replace(".weight", ".bias")] = (0.1 * rng.standard_normal(rows)).astype(np.float32)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf-sources")
    return {"llama": build_model("llama", root / "llama"), "qwen3": build_model("qwen3", root / "qwen3"),
            "qwen2": qwen2_fixture(root / "qwen2"),
            "wide": build_model("llama", root / "wide", spec=WIDE),
            "llama3": build_model("llama", root / "llama3", spec=LLAMA3)}


@pytest.fixture(scope="module")
def made(sources, tmp_path_factory):
    """(source, qtype) -> (gguf file, converted directory, float reference directory)."""
    root = tmp_path_factory.mktemp("gguf-files")
    cache: dict = {}

    def make(source: str, qtype: Q):
        if (source, qtype) not in cache:
            path = write_gguf(sources[source], root / f"{source}.{qtype.name}.gguf", qtype)
            converted = prepare_gguf(path, root / "cache")
            cache[source, qtype] = (path, converted, float_reference(path, converted, root / f"{path.stem}-f32"))
        return cache[source, qtype]

    return make


CASES = [("llama", Q.F32), ("llama", Q.F16), ("llama", Q.Q8_0), ("llama", Q.Q4_0), ("llama", Q.Q4_1),
         ("llama", Q.Q5_0), ("llama", Q.Q5_1), ("qwen3", Q.Q8_0), ("qwen3", Q.Q4_1), ("qwen2", Q.Q4_0), ("wide", Q.Q4_K),
         ("wide", Q.Q5_K), ("wide", Q.Q6_K), ("llama3", Q.Q8_0)]


# The width a type's codes are held in: the file's own, but Q6_K's (re-quantized to 8 bits).
HELD_IN = {Q.Q8_0: "q8", Q.Q4_0: "q4", Q.Q4_1: "q4", Q.Q4_K: "q4", Q.Q5_0: "q5", Q.Q5_1: "q5", Q.Q5_K: "q5",
           Q.Q6_K: "q8"}


@pytest.mark.parametrize("source, qtype", CASES, ids=[f"{s}-{q.name}" for s, q in CASES])
def test_greedy_equals_mlx_lm_on_the_dequantized_file(made, source, qtype):
    _, converted, reference = made(source, qtype)
    stock, tokenizer = mlx_lm.load(str(reference))
    served = load_generation_model(converted)
    if qtype not in (Q.F32, Q.F16):
        widths = set(served.dtype.split(" ")[0].split("/"))
        assert HELD_IN[qtype] in widths and widths <= {"q4", "q5", "q8"}, served.dtype
        from engine import kernels

        if not kernels.turned_off():
            assert any(k.startswith("fused") or k.endswith("_linear") for k in served.kernels)
    for name, text in PROMPTS.items():
        ids = tokenizer.encode(text)
        assert_same_or_tie(stock, ids, greedy(stock, ids, TOKENS), greedy(served.model, ids, TOKENS),
                           f"{source}-{qtype.name}/{name}")


@pytest.mark.parametrize("source", ["llama", "qwen2", "qwen3", "llama3"])
def test_an_f32_file_serves_the_fixture_it_came_from(sources, made, source):
    _, converted, _ = made(source, Q.F32)
    stock, tokenizer = mlx_lm.load(str(sources[source]))
    served = load_generation_model(converted)
    assert served.config["model_type"] == json.loads((sources[source] / "config.json").read_text())["model_type"]
    for name, text in PROMPTS.items():
        ids = tokenizer.encode(text)
        assert tokenizer.encode(text) == served.tokenizer.encode(text)
        assert_same_or_tie(stock, ids, greedy(stock, ids, TOKENS), greedy(served.model, ids, TOKENS), name)


def test_llama3_rope_scaling_comes_back_from_rope_freqs(made):
    _, converted, _ = made("llama3", Q.F32)
    config = json.loads((converted / "config.json").read_text())
    assert config["rope_scaling"] == LLAMA3.extra_config["rope_scaling"]
    import mlx.core as mx

    assert not any("rope" in name for name in mx.load(str(converted / "model.safetensors")))


def test_an_unknown_architecture_is_refused_by_name(sources, tmp_path):
    path = write_gguf(sources["llama"], tmp_path / "m.gguf", Q.F32, arch="mamba")
    with pytest.raises(UnsupportedModel, match="'mamba'"):
        prepare_gguf(path, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/model.safetensors"))


def test_an_unsupported_tensor_type_is_refused_by_name(sources, tmp_path, monkeypatch):
    import tests.gguf_writer as writer

    real = writer.quantize

    def q8_k(value: np.ndarray, qtype):  # well-formed bytes of a type gguf cannot read: refused by its name
        block, size = gguf.GGML_QUANT_SIZES[Q.Q8_K]
        return np.zeros((value.shape[0], max(1, value.shape[1] // block) * size), dtype=np.uint8)

    monkeypatch.setattr(writer, "quantize", lambda v, q: q8_k(v, q) if q == Q.Q8_K else real(v, q))
    path = write_gguf(sources["llama"], tmp_path / "m.gguf", Q.Q8_K)
    with pytest.raises(UnsupportedModel, match="Q8_K"):
        prepare_gguf(path, tmp_path / "cache")


def test_a_codebook_typed_file_is_served_requantized(sources, tmp_path, monkeypatch):
    """IQ4_NL (a 16-level codebook, no affine form): every matrix held as 8-bit groups of
    the values gguf reads, each within 1/510 of its group's range, so a product is within
    that of the float product."""
    import tests.gguf_writer as writer
    from tests.gguf_quantizers import random_blocks

    real, written = writer.quantize, {}

    def iq4(value: np.ndarray, qtype):
        if qtype != Q.IQ4_NL:
            return real(value, qtype)
        raw = random_blocks(Q.IQ4_NL, rows=value.shape[0], cols=value.shape[1])
        written[value.shape] = raw
        return raw

    monkeypatch.setattr(writer, "quantize", iq4)
    path = write_gguf(sources["llama"], tmp_path / "m.gguf", Q.IQ4_NL, embedding_type=Q.F32)
    served = load_generation_model(prepare_gguf(path, tmp_path / "cache"))
    assert served.dtype.startswith("q8 affine")
    layer = served.model.model.layers[0].mlp.down_proj
    raw = written[(layer.weight.shape[0], layer.weight.shape[1] * 4)]
    values = gguf.quants.dequantize(raw.reshape(-1, gguf.GGML_QUANT_SIZES[Q.IQ4_NL][1]), Q.IQ4_NL)
    values = values.reshape(raw.shape[0], -1)
    x = np.random.default_rng(0).standard_normal((1, values.shape[1])).astype(np.float32)
    got = np.array(layer(mx.array(x)))
    spans = np.abs(values).reshape(values.shape[0], -1, 32).max(-1).repeat(32, -1) * 2
    assert np.abs(got - x @ values.T).max() <= (np.abs(x) @ (spans / 510).T).max() * 1.01
