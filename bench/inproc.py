"""In-process measurements: mlx-lm's ``stream_generate`` (the anchor), our engine
without gRPC (``GenerationEngine``), direct embedding forwards, and the physical
limit of decode (read bandwidth / weight bytes)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

import engine  # noqa: F401  - BLAS before mlx
from engine.events import Delta, Finished, Started
from engine.generation.config import GenerationConfig, SchedulerConfig, SpeculationConfig
from engine.generation.frontend.engine import GenerationEngine
from engine.loading.model import LoadedModel
from engine.requests import GenerationRequest, SamplingOptions, SpeculationMode, StopOptions, TextPrompt, TokenPrompt

# -- physical limit ------------------------------------------------------------------------

def weight_bytes(model) -> int:
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def read_bandwidth(nbytes: int = 512 << 20) -> tuple[float, float]:
    """Bytes/s read two ways over ``nbytes`` of float32: ``mx.sum`` (engine.hardware.machine's
    measure, single-threaded in MLX's CPU backend) and a [1, K] x [K, N] matvec
    through the BLAS (decode's access pattern, all BLAS threads); best of 5 each."""
    from engine.hardware.machine import measure_read_bandwidth

    by_sum = measure_read_bandwidth(nbytes)
    k = 4096
    w = mx.random.normal((nbytes // 4 // k, k))
    x = mx.random.normal((1, k))
    mx.eval(w, x)
    mx.eval(x @ w.T)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        mx.eval(x @ w.T)
        best = min(best, time.perf_counter() - start)
    del w
    mx.clear_cache()
    return by_sum, nbytes / best


# -- mlx-lm, in process ---------------------------------------------------------------------

def _no_eos(tokenizer):
    """A logits processor that forbids EOS, so both sides generate exactly N tokens."""
    ids = sorted(int(i) for i in (tokenizer.eos_token_ids or ()))
    if not ids:
        return None
    vocab = None

    def proc(tokens, logits):
        nonlocal vocab
        if vocab is None:
            v = logits.shape[-1]
            mask = [0.0] * v
            for i in ids:
                if i < v:
                    mask[i] = -float("inf")
            vocab = mx.array(mask, dtype=logits.dtype)
        return logits + vocab

    return proc


def mlx_lm_decode(m: LoadedModel, prompt: list[int], tokens: int) -> float:
    """Decode tok/s of mlx_lm.stream_generate: tokens after the first / their time."""
    from mlx_lm.generate import stream_generate

    proc = _no_eos(m.tokenizer)
    times = []
    for _ in stream_generate(m.model, m.tokenizer, prompt, max_tokens=tokens,
                             logits_processors=[proc] if proc else None):
        times.append(time.perf_counter())
    if len(times) < 2:
        return float("nan")
    return (len(times) - 1) / (times[-1] - times[0])


def mlx_lm_generate(m: LoadedModel, prompt: list[int], tokens: int) -> tuple[float, float]:
    """(prefill tok/s, decode tok/s) of one mlx_lm.stream_generate call."""
    from mlx_lm.generate import stream_generate

    proc = _no_eos(m.tokenizer)
    start, times = time.perf_counter(), []
    for _ in stream_generate(m.model, m.tokenizer, prompt, max_tokens=tokens,
                             logits_processors=[proc] if proc else None):
        times.append(time.perf_counter())
    decode = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
    return len(prompt) / (times[0] - start), decode


def mlx_lm_prefill(m: LoadedModel, prompt: list[int]) -> float:
    """Prompt tok/s of mlx_lm.stream_generate (prompt tokens / time to the first token)."""
    from mlx_lm.generate import stream_generate

    start = time.perf_counter()
    for _ in stream_generate(m.model, m.tokenizer, prompt, max_tokens=1):
        break
    return len(prompt) / (time.perf_counter() - start)


# -- our engine, in process ----------------------------------------------------------------

@dataclass
class StreamResult:
    sent: float
    first: float = 0.0  # first generated token's arrival
    token_times: list[float] | None = None
    tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    done: float = 0.0

    @property
    def ttft(self) -> float:
        return self.first - self.sent

    def itl(self) -> list[float]:
        t = self.token_times or []
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def decode_tps(self) -> float:
        t = self.token_times or []
        return (len(t) - 1) / (t[-1] - t[0]) if len(t) > 1 and t[-1] > t[0] else float("nan")


def spread_times(times: list[float], previous: float, arrived: float, n: int) -> None:
    """Appends ``n`` token arrival times for a chunk of ``n`` tokens that arrived at
    ``arrived``: tokens of one chunk are spread evenly since the previous arrival, so
    inter-token latencies are not skewed by zero gaps."""
    if n <= 1 or previous <= 0:
        times.extend([arrived] * n)
        return
    step = (arrived - previous) / n
    times.extend(previous + step * (k + 1) for k in range(n))


class InProcessEngine:
    """Our GenerationEngine without the service, driven from the caller's event loop;
    ``kernels=False`` loads it with MLX's own ops (MLX_GRPC_KERNELS=off while it loads)."""

    def __init__(self, model_dir: Path, max_active: int = 32, kernels: bool = True, speculation: str = "off",
                 dequantize: bool = False):
        cfg = GenerationConfig(dtype="float32", dequantize=dequantize, scheduler=SchedulerConfig(max_active=max_active, max_queued=64),
                               speculation=SpeculationConfig(mode=SpeculationMode(speculation)))
        self.engine = GenerationEngine(str(model_dir), name="bench", config=cfg)
        self.kernels = kernels

    async def start(self) -> None:
        from engine.kernels import ENV_VAR

        saved = os.environ.get(ENV_VAR)
        if not self.kernels:
            os.environ[ENV_VAR] = "off"
        try:
            await self.engine.start()
        finally:
            if saved is None:
                os.environ.pop(ENV_VAR, None)
            else:
                os.environ[ENV_VAR] = saved

    async def close(self) -> None:
        await self.engine.close()

    @property
    def tokenizer(self):
        return self.engine.loaded.tokenizer

    async def generate(self, *, tokens: int, ids: list[int] | None = None, text: str | None = None,
                       bypass: bool = True, ignore_eos: bool = True) -> StreamResult:
        prompt = TokenPrompt(tuple(ids)) if ids is not None else TextPrompt(text or "")
        req = GenerationRequest(prompt=prompt, sampling=SamplingOptions(),
                                stopping=StopOptions(max_tokens=tokens, ignore_eos=ignore_eos),
                                bypass_prefix_cache=bypass)
        r = StreamResult(sent=time.perf_counter(), token_times=[])
        async for ev in self.engine.generate(req):
            now = time.perf_counter()
            if isinstance(ev, Started):
                r.prompt_tokens, r.cached_tokens = ev.prompt_tokens, ev.cached_tokens
            elif isinstance(ev, Delta) and ev.token_ids:
                if not r.first:
                    r.first = now
                spread_times(r.token_times, r.token_times[-1] if r.token_times else 0.0, now, len(ev.token_ids))
                r.tokens += len(ev.token_ids)
            elif isinstance(ev, Finished):
                r.done = now
        return r


# -- embeddings, direct ----------------------------------------------------------------------

class DirectEmbedder:
    """EmbeddingModel.embed in this process, with the CPU kernels or the stock encoder."""

    def __init__(self, model_dir: Path, kernels: bool = True):
        from engine.embedding.engine import load_embedder
        from engine.embedding.pooling import EmbeddingModel

        self.model = load_embedder(Path(model_dir)) if kernels else EmbeddingModel.load(Path(model_dir))

    def rate(self, texts: list[str]) -> float:
        start = time.perf_counter()
        self.model.embed(texts)
        return len(texts) / (time.perf_counter() - start)
