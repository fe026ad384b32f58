"""``--embed-precision``: bf16 and int8 products hold their accuracy bounds against float32 on
the embedded MiniLM (bf16: cosine >= 0.9999 on every input; int8: >= 0.999 and the top 10 of a
small retrieval the same to 95%), run only where the CPU makes them pay unless forced, and a
server started with them says what runs in GetModelInfo's dtype."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.embedding.precision import F32, choose, cpu_flags
from tests.conftest import HAS_MINILM
from tests.kernel_helpers import kernels_ext

WIDTHS = (384, 1536)
WORDS = ("river bank loan interest tide harbour ledger credit current basin deposit rate stream vault shore "
         "account flood market channel reserve").split()


def texts(n: int, salt: int, words: int) -> list[str]:
    rng = np.random.default_rng(salt)
    return [" ".join(rng.choice(WORDS, size=words)) + f" #{salt}-{i}" for i in range(n)]


def test_choose_runs_a_precision_only_where_the_cpu_has_its_instructions():
    assert choose("f32", encoder_widths=WIDTHS, kernels=None) is F32
    plain = frozenset({"avx2", "fma"})
    for precision, flag in (("bf16", "avx512_bf16"), ("int8", "avx512_vnni"), ("int8", "avx_vnni")):
        slow = choose(precision, encoder_widths=WIDTHS, kernels=None, flags=plain)
        assert (slow.requested, slow.running, slow.dtype) == (precision, "f32", "float32")
        assert flag.upper() in slow.reason and "slower than float32" in slow.reason
        fast = choose(precision, encoder_widths=WIDTHS, kernels=None, flags=plain | {flag})
        assert (fast.running, fast.reason) == (precision, "")
        assert choose(precision, encoder_widths=WIDTHS, kernels=None, flags=plain, force=True).running == precision
    assert choose("int8", encoder_widths=WIDTHS, kernels=None, flags=frozenset(), force=True).dtype == "int8"
    assert choose("bf16", encoder_widths=WIDTHS, kernels=None, flags=frozenset(), force=True).dtype == "bfloat16"


def test_choose_says_why_a_model_runs_float32():
    decoder = choose("int8", encoder_widths=None, kernels=None, force=True)
    assert decoder.running == "f32" and "only BERT encoders" in decoder.reason
    off = choose("bf16", encoder_widths=WIDTHS, kernels="the CPU kernels are off", force=True)
    assert off.running == "f32" and off.reason.endswith("the CPU kernels are off")
    odd = choose("int8", encoder_widths=(384, 1000), kernels=None, force=True)
    assert odd.running == "f32" and "1000 is not a multiple of 32" in odd.reason
    assert choose("bf16", encoder_widths=(384, 1000), kernels=None, force=True).running == "bf16"
    with pytest.raises(ValueError, match="one of f32, bf16, int8"):
        choose("q4", encoder_widths=WIDTHS, kernels=None)


def test_the_command_line_takes_a_precision_per_model():
    from service import cli
    from service.assembly import precision_by_model

    args = cli.build_parser().parse_args(["serve", "--embed-precision", "int8", "--embed-precision", "b=bf16"])
    assert args.embed_precision == [("", "int8"), ("b", "bf16")] and not args.embed_precision_force
    assert precision_by_model(args.embed_precision, ["a", "b"]) == {"a": "int8", "b": "bf16"}
    assert precision_by_model([], ["a"]) == {"a": "f32"}
    with pytest.raises(SystemExit, match="no embedding model is called 'c'"):
        precision_by_model([("c", "int8")], ["a", "b"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--embed-precision", "a=fp8"])


@pytest.fixture(scope="module")
def minilm():
    if not HAS_MINILM:
        pytest.skip("the embedded MiniLM is not installed")
    from engine.embedding.kinds import load_embedder
    from engine.loading.embedded import default_embedding_model

    return lambda precision="f32", force=False: load_embedder(default_embedding_model(), precision, force)


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    """Short sentences and passages of mixed lengths (documents), and queries."""
    documents = texts(96, 1, 12) + [" ".join(itertools.repeat(t, 12)) for t in texts(32, 2, 14)]
    return documents, texts(24, 3, 6)


def vectors(model, inputs: list[str]) -> np.ndarray:
    return np.stack([r.vector for r in model.embed(inputs)])


def test_bf16_and_int8_hold_their_bounds_against_float32(minilm, corpus):
    kernels_ext()
    documents, queries = corpus
    base = minilm()
    reference, asked = vectors(base, documents), vectors(base, queries)
    bf16, int8 = minilm("bf16", True), minilm("int8", True)
    assert (bf16.precision.running, int8.precision.running) == ("bf16", "int8")
    assert (np.sum(vectors(bf16, documents) * reference, axis=1) >= 0.9999).all()
    ours = vectors(int8, documents)
    assert (np.sum(ours * reference, axis=1) >= 0.999).all()
    assert not np.array_equal(ours, reference)  # the products did change
    top = lambda docs, qs: np.argsort(-(qs @ docs.T), axis=1)[:, :10]  # noqa: E731
    overlap = [len(set(a) & set(b)) / 10 for a, b in zip(top(reference, asked), top(ours, vectors(int8, queries)))]
    assert np.mean(overlap) >= 0.95


def test_a_precision_without_its_instructions_or_kernels_runs_float32_and_says_so(minilm, caplog):
    from engine import kernels

    if kernels.turned_off():
        with caplog.at_level("WARNING", logger="engine.embedding"):
            model = minilm("int8", True)
        assert model.precision.dtype == "float32" and "the CPU kernels are off" in model.precision.reason
        assert "--embed-precision int8 runs float32: the CPU kernels are off" in caplog.text
        return
    fast = {"bf16": ("avx512_bf16", "amx_bf16"), "int8": ("avx512_vnni", "avx_vnni", "amx_int8")}
    for precision, flags in fast.items():
        with caplog.at_level("WARNING", logger="engine.embedding"):
            model = minilm(precision)
        if any(f in cpu_flags() for f in flags):
            assert model.precision.running == precision
        else:
            assert model.precision.dtype == "float32"
            assert f"--embed-precision {precision} runs float32" in caplog.text


def test_a_server_started_with_precisions_says_what_runs(fixture_models, tmp_path):
    kernels_ext()
    if not HAS_MINILM:
        pytest.skip("the embedded MiniLM is not installed")
    from engine.loading.embedded import default_embedding_model
    from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
    from tests.cluster import Replica

    mini = default_embedding_model()
    replica = Replica("precision", fixture_models["llama"], tmp_path, "--embedding-model", f"i8={mini}",
                      "--embedding-model", f"b16={mini}", "--embedding-model", f"f32={mini}",
                      "--embed-precision", "i8=int8", "--embed-precision", "b16=bf16", "--embed-precision-force")
    try:
        replica.wait_until(replica.serving, 180, "health SERVING")
        dtypes = {m: replica.stub.GetModelInfo(pb.GetModelInfoRequest(model=m), timeout=30).info.dtype
                  for m in ("i8", "b16", "f32")}
        assert dtypes == {"i8": "int8", "b16": "bfloat16", "f32": "float32"}
        inputs = texts(8, 4, 10)
        got = {m: np.array([list(r.embedding) for r in sorted(replica.stub.Embed(
            pb.EmbedRequest(model=m, inputs=inputs), timeout=60), key=lambda r: r.index)]) for m in dtypes}
        assert (np.sum(got["i8"] * got["f32"], axis=1) >= 0.999).all()
        assert (np.sum(got["b16"] * got["f32"], axis=1) >= 0.9999).all()
    finally:
        replica.stop()


def _bf16(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest even), as float32."""
    bits = a.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (37, 100, 70), (64, 384, 384), (129, 40, 1536)])
def test_the_kernels_bf16_product_is_the_bf16_rounded_float_product(M, N, K):
    """x @ W.T + bias + residual on bfloat16-rounded x and W with float32 sums, any row, column
    and width count (tails of the 8-row, 32-column tiles and of the k pairs)."""
    import mlx.core as mx

    ext = kernels_ext()
    if not ext.packed_available("bf16"):
        pytest.skip("the kernels were built without AVX-512 BF16 (ggml's product serves bf16)")
    rng = np.random.default_rng(M * N + K)
    x, w = rng.normal(size=(M, K)).astype(np.float32), (rng.normal(size=(N, K)) * 0.05).astype(np.float32)
    bias, residual = rng.normal(size=N).astype(np.float32), rng.normal(size=(M, N)).astype(np.float32)
    packed = ext.linear_pack(mx.array(w), "bf16")
    want = _bf16(x).astype(np.float64) @ _bf16(w).astype(np.float64).T
    got = np.array(ext.packed_linear(mx.array(x), packed, "bf16", N))
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.sqrt(K) * np.abs(want).max() + 1e-7)
    tol = 2e-6 * np.sqrt(K) * np.abs(want).max()
    both = np.array(ext.packed_linear(mx.array(x), packed, "bf16", N, mx.array(bias), mx.array(residual)))
    np.testing.assert_allclose(both, want + bias + residual, rtol=0, atol=tol + 1e-5)
    assert not np.allclose(got, x @ w.T, rtol=0, atol=1e-7 * np.abs(want).max())  # bf16 values, not float32's


def _q8_blocks(a: np.ndarray) -> np.ndarray:
    """Rows of ``a`` as int8 codes times their block scale, blocks of 32 along the row (Q8_0's values)."""
    k = a.shape[1]
    padded = np.zeros((a.shape[0], -(-k // 32) * 32), dtype=np.float32)
    padded[:, :k] = a
    blocks = padded.reshape(a.shape[0], -1, 32)
    scale = (np.abs(blocks).max(axis=2, keepdims=True) / np.float32(127)).astype(np.float32)
    inv = np.where(scale > 0, np.float32(127) / np.where(scale > 0, scale * 127, 1), 0).astype(np.float32)
    codes = np.clip(np.rint(blocks * inv), -127, 127)
    return (codes * scale).reshape(a.shape[0], -1)[:, :k]


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (37, 100, 70), (64, 384, 384), (129, 40, 1536)])
def test_the_kernels_int8_product_is_the_q8_block_product(M, N, K):
    """x @ W.T + bias + residual on x and W rounded to 8-bit codes in blocks of 32 with a scale
    each, any row, column and width count."""
    import mlx.core as mx

    ext = kernels_ext()
    if not ext.packed_available("int8"):
        pytest.skip("the kernels were built without AVX-512 VNNI (ggml's Q8_0 product serves int8)")
    rng = np.random.default_rng(M * N + K + 1)
    x, w = rng.normal(size=(M, K)).astype(np.float32), (rng.normal(size=(N, K)) * 0.05).astype(np.float32)
    bias, residual = rng.normal(size=N).astype(np.float32), rng.normal(size=(M, N)).astype(np.float32)
    packed = ext.linear_pack(mx.array(w), "int8")
    want = _q8_blocks(x).astype(np.float64) @ _q8_blocks(w).astype(np.float64).T
    tol = 1e-3 * np.abs(want).max()  # a code may round the other way at a tie of float32 arithmetic
    got = np.array(ext.packed_linear(mx.array(x), packed, "int8", N, mx.array(bias), mx.array(residual)))
    np.testing.assert_allclose(got, want + bias + residual, rtol=0, atol=tol + 1e-5)
    if K > 1:  # one value is its own block's largest: its code is exact
        assert np.abs(got - bias - residual - x @ w.T).max() > 1e-4 * np.abs(want).max()  # codes, not floats


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (37, 100, 70), (64, 384, 384), (129, 40, 1536)])
def test_the_kernels_f32_product_is_the_float_product(M, N, K):
    """x @ W.T + bias + residual in float32 on the packed weight, any row, column and width count
    (tails of the 12-row, 32-column tiles), within float32's rounding of the float64 product."""
    import mlx.core as mx

    ext = kernels_ext()
    if not ext.packed_available("f32"):
        pytest.skip("the kernels were built without AVX-512 (MLX's BLAS serves f32)")
    rng = np.random.default_rng(M * N + K + 2)
    x, w = rng.normal(size=(M, K)).astype(np.float32), (rng.normal(size=(N, K)) * 0.05).astype(np.float32)
    bias, residual = rng.normal(size=N).astype(np.float32), rng.normal(size=(M, N)).astype(np.float32)
    packed = ext.linear_pack(mx.array(w), "f32")
    want = x.astype(np.float64) @ w.astype(np.float64).T
    tol = 1e-6 * np.sqrt(K) * np.abs(want).max() + 1e-6
    got = np.array(ext.packed_linear(mx.array(x), packed, "f32", N))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    both = np.array(ext.packed_linear(mx.array(x), packed, "f32", N, mx.array(bias), mx.array(residual)))
    np.testing.assert_allclose(both, want + bias + residual, rtol=0, atol=tol + 1e-5)


@pytest.mark.parametrize("kind", ["f32", "bf16", "int8"])
@pytest.mark.parametrize("act,approximate", [("gelu", False), ("gelu_tanh", True)])
def test_a_packed_product_applies_gelu_in_its_epilogue(kind, act, approximate):
    """act= gives the same values as the kernels' GELU over the product's output."""
    import mlx.core as mx

    ext = kernels_ext()
    if not ext.packed_available(kind):
        pytest.skip(f"the kernels were built without the {kind} product")
    rng = np.random.default_rng(7)
    x = mx.array(rng.normal(size=(50, 96)).astype(np.float32))
    w = mx.array(rng.normal(size=(70, 96)).astype(np.float32))
    bias = mx.array(rng.normal(size=70).astype(np.float32))
    packed = ext.linear_pack(w, kind)
    plain = ext.gelu(ext.packed_linear(x, packed, kind, 70, bias), approximate)
    fused = ext.packed_linear(x, packed, kind, 70, bias, act=act)
    np.testing.assert_array_equal(np.array(fused), np.array(plain))


@pytest.mark.parametrize("kind", ["f32", "bf16", "int8"])
def test_a_packed_products_row_does_not_depend_on_the_rows_beside_it(kind):
    """Each row alone gives the bits it gives among 1-63 others (every micro-kernel height)."""
    import mlx.core as mx

    ext = kernels_ext()
    if not ext.packed_available(kind):
        pytest.skip(f"the kernels were built without the {kind} product")
    rng = np.random.default_rng(8)
    x, w = rng.normal(size=(64, 384)).astype(np.float32), rng.normal(size=(100, 384)).astype(np.float32)
    packed = ext.linear_pack(mx.array(w), kind)
    whole = np.array(ext.packed_linear(mx.array(x), packed, kind, 100))
    for rows in (1, 5, 9, 13, 63):
        part = np.array(ext.packed_linear(mx.array(x[-rows:]), packed, kind, 100))
        np.testing.assert_array_equal(part, whole[-rows:])


def test_packed_products_refuse_what_they_cannot_run():
    import mlx.core as mx

    ext = kernels_ext()
    w = mx.zeros((8, 16))
    with pytest.raises(ValueError, match="kind"):
        ext.linear_pack(w, "f16")
    if ext.packed_available("f32"):
        packed = ext.linear_pack(w, "f32")
        with pytest.raises(ValueError, match="linear_pack's output"):
            ext.packed_linear(mx.zeros((2, 15)), packed, "f32", 8)
        with pytest.raises(ValueError, match="act"):
            ext.packed_linear(mx.zeros((2, 16)), packed, "f32", 8, act="relu")
