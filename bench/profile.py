"""Where a decode step and a prefill chunk spend their time, with the stock mlx-lm
model and with the CPU kernels put in (``python -m bench --profile``).

One forward is recorded: every call of a matmul, attention, RoPE, norm or
activation, with its inputs. Each category is then replayed alone (its calls, in
one evaluation) and timed; "the rest" is the full forward minus those, which
leaves the KV-cache updates (a fused block writes its own inside qkv_rope_append,
counted as RoPE), reshapes, residual adds and embedding lookup together with MLX's
per-op scheduling. Graph construction (Python) is timed apart, and the
primitive count of the step says how many ops MLX schedules.
"""

from __future__ import annotations

import io
import re
import statistics
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import engine  # noqa: F401  - BLAS before mlx
import mlx.core as mx
import mlx.nn as nn

CATEGORIES = ("matmul", "attention", "rope", "norms", "activations")


@dataclass
class Profile:
    total: float = 0.0  # ms: build + evaluate
    build: float = 0.0  # ms: graph construction alone
    parts: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    primitives: int = 0

    @property
    def rest(self) -> float:
        return max(0.0, self.total - self.build - sum(self.parts.values()))


def _hook_points():
    """(category, owner, attribute) of everything worth timing, stock and kernels."""
    from mlx_lm.models import activations

    from engine import kernels
    from engine.kernels import modules

    points = [("matmul", nn.Linear, "__call__"), ("matmul", nn.QuantizedLinear, "__call__"),
              ("matmul", nn.Embedding, "as_linear"), ("matmul", nn.QuantizedEmbedding, "as_linear"),
              ("matmul", modules.KernelLinear, "__call__"), ("matmul", modules.KernelEmbedding, "as_linear"),
              ("attention", mx.fast, "scaled_dot_product_attention"), ("rope", mx.fast, "rope"),
              ("norms", mx.fast, "rms_norm"), ("norms", mx.fast, "layer_norm"),
              ("activations", activations, "swiglu"), ("activations", nn, "gelu"),
              ("activations", nn, "gelu_approx"), ("activations", nn, "silu")]
    if kernels.status().available:
        ext = kernels.ext()
        points += [("matmul", ext, "linear"), ("matmul", ext, "quantized_matmul"), ("attention", ext, "attention"),
                   ("rope", ext, "rope"), ("rope", ext, "qkv_rope"), ("rope", ext, "qkv_rope_append"),
                   ("norms", ext, "rms_norm"), ("norms", ext, "layer_norm"), ("activations", ext, "silu_gate"),
                   ("activations", ext, "silu_gate_halves"), ("activations", ext, "gelu")]
    return points


def _model_modules():
    """mlx-lm model modules holding their own reference to swiglu."""
    import sys

    return [m for name, m in list(sys.modules.items())
            if name.startswith("mlx_lm.models.") and m is not None and hasattr(m, "swiglu")]


@contextmanager
def recording(calls: list):
    """Wraps the hook points; appends (category, original, args, kwargs) per call,
    outermost calls only (a stock op calling another is counted once)."""
    depth = [0]

    def wrap(category, original):
        def recorder(*args, **kwargs):
            if depth[0]:
                return original(*args, **kwargs)
            depth[0] += 1
            try:
                calls.append((category, original, args, kwargs))
                return original(*args, **kwargs)
            finally:
                depth[0] -= 1
        return recorder

    with ExitStack() as stack:
        points = _hook_points() + [("activations", m, "swiglu") for m in _model_modules()]
        for category, owner, name in points:
            original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
            if original is None:
                continue
            setattr(owner, name, wrap(category, original))
            stack.callback(setattr, owner, name, original)
        yield


def _best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def primitives(out: mx.array) -> int:
    buf = io.StringIO()
    mx.export_to_dot(buf, out)
    return len(re.findall(r'label ="[A-Za-z]', buf.getvalue()))


def profile_calls(forward, reps: int, reset=lambda: None) -> Profile:
    """Records one ``forward()``, replays each category's calls alone, then times the whole
    forward built, and built and evaluated; ``reset()`` runs after every forward."""
    p = Profile()
    calls: list = []
    with recording(calls):
        out = forward()
    p.primitives = primitives(out)
    mx.eval(out)
    reset()
    for category in CATEGORIES:
        mine = [(fn, a, k) for c, fn, a, k in calls if c == category]
        p.calls[category] = len(mine)
        if mine:
            p.parts[category] = _best(lambda: mx.eval([fn(*a, **k) for fn, a, k in mine]), reps)
    del calls

    def timed(evaluate: bool) -> float:
        start = time.perf_counter()
        y = forward()
        if evaluate:
            mx.eval(y)
        elapsed = time.perf_counter() - start
        mx.eval(y)
        reset()
        return elapsed

    p.build = min(timed(False) for _ in range(reps)) * 1e3
    p.total = min(timed(True) for _ in range(reps)) * 1e3
    return p


def profile_forward(model, tokens: mx.array, cache, reps: int = 5) -> Profile:
    """Profiles ``model(tokens)`` on ``cache`` (a prompt cache holding the context;
    trimmed back after every forward)."""
    from mlx_lm.models.cache import trim_prompt_cache

    n = tokens.shape[1]
    return profile_calls(lambda: model(tokens, cache=cache), reps, lambda: trim_prompt_cache(cache, n))


def context_cache(model, context: int):
    """A prompt cache already holding ``context`` tokens."""
    from mlx_lm.models.cache import make_prompt_cache

    prompt = mx.array([[(7 * i) % 1000 + 10 for i in range(context)]])
    cache = make_prompt_cache(model)
    for start in range(0, context, 512):
        mx.eval(model(prompt[:, start:start + 512], cache=cache))
    return cache


def sampling_ms(vocab: int, reps: int = 20) -> tuple[float, float]:
    """Greedy (argmax) and temperature/top-k sampling of one row of logits."""
    logits = mx.random.normal((1, vocab))
    mx.eval(logits)
    greedy = _best(lambda: mx.eval(mx.argmax(logits, axis=-1)), reps)

    def sample():
        top = mx.argpartition(-logits, 40, axis=-1)[:, :40]
        picked = mx.random.categorical(mx.take_along_axis(logits, top, axis=-1) / 0.8)
        mx.eval(mx.take_along_axis(top, picked[:, None], axis=-1))
    return greedy, _best(sample, reps)


def median(values):
    return statistics.median(values) if values else float("nan")


# -- the report ------------------------------------------------------------------------------

def bare_decode_ms(model, context: int, steps: int = 16) -> float:
    """Median time of one greedy decode step (forward, argmax, eval) in a plain loop."""
    cache = context_cache(model, context)
    y = mx.array([[11]])
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        y = mx.argmax(model(y, cache=cache)[:, -1:], axis=-1)
        mx.eval(y)
        times.append(time.perf_counter() - start)
    return median(times) * 1e3


def run(model_dir, context: int = 512, chunk: int = 256, reps: int = 5, log=print) -> str:
    from engine.loading.model import load_generation_model

    sides = {}
    for label, use in (("stock", False), ("kernels", True)):
        m = load_generation_model(model_dir, dtype="float32", use_kernels=use)
        log(f"profiling {label} ({', '.join(f'{k} x{v}' for k, v in sorted(m.kernels.items())) or 'mlx ops'})")
        decode = profile_forward(m.model, mx.array([[11]]), context_cache(m.model, context), reps)
        prefill = profile_forward(m.model, mx.array([[(3 * i) % 900 + 20 for i in range(chunk)]]),
                                  context_cache(m.model, chunk), max(2, reps // 2))
        sides[label] = (decode, prefill, bare_decode_ms(m.model, context), m.vocab_size)
        del m
    greedy, sampled = sampling_ms(sides["stock"][3])
    head = (f"| part | decode step, {context}-token context: stock | kernels "
            f"| prefill chunk of {chunk} after {chunk}: stock | kernels |")
    rows = [head, "|---|---|---|---|---|"]

    def row(name, get, fmt="{:.1f}"):
        cells = [get(sides[s][i]) for i in (0, 1) for s in ("stock", "kernels")]
        rows.append(f"| {name} | " + " | ".join(fmt.format(c) for c in cells) + " |")

    for category in CATEGORIES:
        row(f"{category} ms (calls)", lambda p, c=category: (p.parts.get(c, 0.0), p.calls.get(c, 0)),
            fmt="{0[0]:.1f} ({0[1]})")
    row("the rest: cache updates, reshapes, adds, scheduling ms", lambda p: p.rest)
    row("graph construction (Python) ms", lambda p: p.build)
    row("**forward, built and evaluated, ms**", lambda p: p.total)
    row("MLX primitives scheduled", lambda p: p.primitives, fmt="{}")
    rows.append(f"| decode step in a bare greedy loop, ms | {sides['stock'][2]:.1f} | {sides['kernels'][2]:.1f} | | |")
    rows.append(f"| sampling one row ({sides['stock'][3]} logits): greedy / top-k 40 ms "
                f"| {greedy:.2f} / {sampled:.2f} | | | |")
    return "\n".join(rows)
