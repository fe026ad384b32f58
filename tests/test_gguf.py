"""GGUF -> Hugging Face directory conversion (engine.loading.gguf) on the bundled SmolLM2 model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from engine.caches.fingerprint import DIGESTS_NAME
from engine.loading.embedded import EmbeddedModelMissing, default_embedding_model, default_generation_model
from engine.loading.gguf import build_config, permute_qk, prepare_gguf, unpermute_qk
from engine.loading.gguf_tokenizer import pre_tokenizer_for

# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def smollm_gguf() -> Path:
    try:
        return default_generation_model()
    except EmbeddedModelMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def gguf_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gguf-cache")


@pytest.fixture(scope="session")
def converted(smollm_gguf: Path, gguf_cache: Path) -> tuple[Path, list[tuple[str, float]]]:
    """The converted SmolLM2 directory and the progress calls made while converting."""
    calls: list[tuple[str, float]] = []
    out = prepare_gguf(smollm_gguf, gguf_cache, progress=lambda s, f: calls.append((s, f)))
    return out, calls


@pytest.fixture(scope="session")
def smollm_dir(converted: tuple[Path, list[tuple[str, float]]]) -> Path:
    return converted[0]


@pytest.fixture(scope="session")
def smollm(smollm_dir: Path):
    import mlx_lm

    return mlx_lm.load(str(smollm_dir))


@pytest.fixture(scope="session")
def raw_tokenizer(smollm_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(str(smollm_dir / "tokenizer.json"))


# ---------------------------------------------------------------- pure functions


@pytest.mark.parametrize("n_head, rows", [(9, 576), (3, 192), (1, 8)])
def test_unpermute_inverts_llama_cpp_permute(n_head: int, rows: int) -> None:
    weight = np.random.default_rng(0).standard_normal((rows, 16)).astype(np.float32)
    permuted = permute_qk(weight, n_head)
    assert not np.array_equal(permuted, weight)
    np.testing.assert_array_equal(unpermute_qk(permuted, n_head), weight)
    np.testing.assert_array_equal(permute_qk(unpermute_qk(weight, n_head), n_head), weight)


def test_permute_matches_convert_hf_to_gguf_reference() -> None:
    """Per head, llama.cpp interleaves the two rope halves: rows [a0 b0 a1 b1 ...]."""
    weight = np.arange(8)[:, None]  # one head of dim 8: halves a = 0..3, b = 4..7
    assert permute_qk(weight, 1)[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


def test_other_architectures_are_rejected() -> None:
    from engine.errors import UnsupportedModel

    with pytest.raises(UnsupportedModel, match="'mamba'.*served: llama, qwen2, qwen3"):
        build_config({"general.architecture": "mamba"}, set())


def test_unknown_pre_tokenizer_is_rejected() -> None:
    with pytest.raises(ValueError, match="mystery"):
        pre_tokenizer_for("mystery")


def test_qwen2_pre_tokenizer_splits_digits_one_by_one_and_keeps_llama3_words() -> None:
    pieces = [p for p, _ in pre_tokenizer_for("qwen2").pre_tokenize_str("It's 2024 now")]
    assert pieces == ["It", "'s", "Ġ", "2", "0", "2", "4", "Ġnow"]
    assert [p for p, _ in pre_tokenizer_for("llama-bpe").pre_tokenize_str("2024")] == ["202", "4"]


def test_embedded_embedding_model_is_found() -> None:
    try:
        path = default_embedding_model()
    except EmbeddedModelMissing as exc:
        pytest.skip(str(exc))
    assert (path / "config.json").is_file()


# ---------------------------------------------------------------- the converted model


@pytest.mark.slow
def test_output_files_and_config(smollm_dir: Path) -> None:
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "generation_config.json"):
        assert (smollm_dir / name).is_file(), name
    config = json.loads((smollm_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert (config["num_hidden_layers"], config["hidden_size"]) == (30, 576)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert config["vocab_size"] == 49152
    assert config["tie_word_embeddings"] is True
    assert config["rope_theta"] == 100000.0
    assert config["rms_norm_eps"] == 1e-5
    assert config["max_position_embeddings"] == 8192
    tok_config = json.loads((smollm_dir / "tokenizer_config.json").read_text())
    assert tok_config["add_bos_token"] is False
    assert "<|im_start|>" in tok_config["chat_template"]


@pytest.mark.slow
def test_progress_is_reported(converted: tuple[Path, list[tuple[str, float]]]) -> None:
    _, calls = converted
    weights = [f for stage, f in calls if stage == "weights"]
    assert len(weights) > 10 and weights == sorted(weights) and weights[-1] == 1.0
    assert calls[-1] == ("done", 1.0)


@pytest.mark.slow
def test_second_prepare_does_not_reconvert(smollm_gguf: Path, gguf_cache: Path, smollm_dir: Path) -> None:
    before = (smollm_dir / "model.safetensors").stat().st_mtime_ns
    calls: list[tuple[str, float]] = []
    again = prepare_gguf(smollm_gguf, gguf_cache, progress=lambda s, f: calls.append((s, f)))
    assert again == smollm_dir
    assert calls == []
    assert (smollm_dir / "model.safetensors").stat().st_mtime_ns == before
    # no temp dirs left; beside the model, the file digests kept by identity
    assert sorted(p.name for p in gguf_cache.iterdir()) == sorted([smollm_dir.name, DIGESTS_NAME])


def test_a_changed_converter_converts_again(smollm_gguf: Path, monkeypatch) -> None:
    """The converter's source is in every fingerprint: a conversion cached by another
    converter (one that held some types at other widths, say) is never served."""
    from engine.loading import gguf

    before = gguf.gguf_fingerprint(smollm_gguf)
    assert gguf.gguf_fingerprint(smollm_gguf) == before
    monkeypatch.setattr(gguf, "_CONVERTER_FILES", gguf._CONVERTER_FILES[:-1])
    gguf.converter_digest.cache_clear()
    try:
        assert gguf.gguf_fingerprint(smollm_gguf) != before
    finally:
        monkeypatch.undo()
        gguf.converter_digest.cache_clear()
    assert gguf.gguf_fingerprint(smollm_gguf) == before


def test_a_file_changed_in_the_middle_converts_again(smollm_gguf: Path, tmp_path: Path) -> None:
    """The fingerprint covers the whole file: an edit that keeps the size and both ends (a
    re-quantized tensor in the middle, say) never serves the old conversion."""
    from engine.loading import gguf

    copy = tmp_path / smollm_gguf.name
    shutil.copyfile(smollm_gguf, copy)
    state = tmp_path / "state"
    before = gguf.gguf_fingerprint(copy, state)
    assert gguf.gguf_fingerprint(copy, state) == before  # the digest is kept by the file's identity
    middle = copy.stat().st_size // 2
    with copy.open("r+b") as f:
        f.seek(middle)
        byte = f.read(1)
        f.seek(middle)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert gguf.gguf_fingerprint(copy, state) != before


@pytest.mark.slow
@pytest.mark.parametrize(
    "text",
    ["What is the capital of France?", "12345", "héllo wörld 🚀🎉 日本語", "  two  spaces\n\ttab",
     "<|im_start|>user\nhi<|im_end|>\n"],
)
def test_tokenizer_round_trips(raw_tokenizer: Tokenizer, smollm, text: str) -> None:
    ids = raw_tokenizer.encode(text).ids
    assert raw_tokenizer.decode(ids, skip_special_tokens=False) == text
    _, tokenizer = smollm
    assert tokenizer.encode(text, add_special_tokens=True) == ids  # no BOS added
    assert tokenizer.decode(ids) == text


@pytest.mark.slow
def test_tokenizer_matches_gguf_vocab(raw_tokenizer: Tokenizer) -> None:
    assert raw_tokenizer.encode(" Paris").tokens == ["ĠParis"]
    assert raw_tokenizer.encode(" Paris").ids == [7042]
    assert raw_tokenizer.encode("12345").tokens == list("12345")  # smollm: one token per digit
    assert raw_tokenizer.encode(" 3 items").tokens == ["Ġ", "3", "Ġitems"]
    assert raw_tokenizer.encode("<|im_start|>").ids == [1]
    assert raw_tokenizer.encode("<|im_end|>").ids == [2]
    assert raw_tokenizer.decode([1, 7042, 2], skip_special_tokens=True) == " Paris"


@pytest.mark.slow
def test_greedy_chat_answers_paris(smollm) -> None:
    import mlx_lm
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = smollm
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|im_start|>assistant\n")
    text = mlx_lm.generate(model, tokenizer, prompt=prompt, max_tokens=20, sampler=make_sampler(temp=0.0))
    assert "Paris" in text
