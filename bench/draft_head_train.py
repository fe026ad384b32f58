"""Trains a small EAGLE-3 draft head for the embedded SmolLM2 on its own greedy outputs
(self-distillation), and writes it as a head directory ``--draft-model`` takes.

    .venv/bin/python -m bench.draft_head_train                 # ~35 minutes on 2 cores
    .venv/bin/python -m bench.draft_head_train --minutes 2 --prompts 96   # a quick one

1. Data: the target answers a few hundred chat prompts greedily (topics x instructions,
   then "repeat this" prompts over some of its own answers, so copying is learned too),
   and reads chats whose answers are docstrings of Python's standard library (no
   generation needed). None of the speculation bench's prompts are among them.
2. Features: one forward per sequence records the outputs of the three tapped layers
   and the target's greedy choice after every position: the labels.
3. Training: the head reads (the taps at position p, the token at p + 1) and learns the
   target's choice after p + 1, at every position; a second,
   chained step reads its own output hidden state instead (EAGLE-3's training-time
   test, two steps), so drafts chain at inference as they were trained. The output
   layer is the target's own, frozen, over the labels' most frequent tokens
   (``--draft-vocab``), mapped back to the target's ids by ``d2t``.

The weights are made by running this, never committed; ``bench.spec_heads`` trains one
when its directory is missing.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten

import engine  # noqa: F401  - BLAS before mlx

from .run import log

TOPICS = ["volcanoes", "the history of bread", "how bees communicate", "learning a second language", "chess openings",
          "the water cycle", "electric cars", "medieval castles", "saving money", "black holes", "coral reefs",
          "the printing press", "running a marathon", "photosynthesis", "jazz music", "the Roman roads",
          "caring for houseplants", "how vaccines work", "the Silk Road", "climate and weather", "recycling plastic",
          "the human heart", "writing a resume", "ancient Egypt", "solar panels", "penguins", "baking sourdough",
          "the moon landing", "earthquakes", "public libraries", "sleep and memory", "the Olympic games",
          "how computers store numbers", "wolves", "tea ceremonies", "glaciers", "bicycles", "the stock market",
          "origami", "lighthouses"]
INSTRUCTIONS = ["Write a short paragraph about {t}.", "Explain {t} to a ten-year-old.",
                "List five interesting facts about {t}.", "Write a short poem about {t}.",
                "What are the most common misconceptions about {t}?", "Give three tips for someone curious about {t}.",
                "Summarize the key ideas of {t} in a few sentences.", "Write a short dialogue between two friends "
                                                                      "about {t}."]
COPY = ["Repeat the following text exactly, word for word:\n\n{x}",
        "Copy this text and change nothing:\n\n{x}"]


def prompts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    every = [i.format(t=t) for t in TOPICS for i in INSTRUCTIONS]
    rng.shuffle(every)
    return every[:count]


async def answers(model_dir: Path, chats: list[list[dict]], tokens: int,
                  temperature: float = 0.0) -> list[tuple[list[int], int]]:
    """(prompt + answer ids, prompt length) per chat, 16 at a time; greedy, or sampled
    at ``temperature`` (chat ``i`` seeded ``i``)."""
    from engine.events import Delta
    from engine.generation.config import GenerationConfig, SchedulerConfig
    from engine.generation.frontend.engine import GenerationEngine
    from engine.requests import (
        GenerationRequest,
        SamplingOptions,
        SpeculationMode,
        SpeculationOptions,
        StopOptions,
        TokenPrompt,
    )

    eng = GenerationEngine(str(model_dir), name="teacher", config=GenerationConfig(
        dtype="float32", scheduler=SchedulerConfig(max_active=16)))
    await eng.start()
    tok = eng.loaded.tokenizer
    gate = asyncio.Semaphore(16)

    async def one(i: int, chat) -> tuple[list[int], int]:
        ids = tok.apply_chat_template(chat, add_generation_prompt=True)
        sampling = SamplingOptions(temperature=temperature, seed=i) if temperature else SamplingOptions()
        async with gate:
            out = [t async for ev in eng.generate(GenerationRequest(
                TokenPrompt(tuple(ids)), stopping=StopOptions(max_tokens=tokens), sampling=sampling,
                speculation=SpeculationOptions(SpeculationMode.OFF))) if isinstance(ev, Delta) for t in ev.token_ids]
        return ids + out, len(ids)

    try:
        return await asyncio.gather(*(one(i, c) for i, c in enumerate(chats)))
    finally:
        await eng.close()


def tap_features(model: nn.Module, seqs: list[list[int]], layers: tuple[int, ...]
                 ) -> list[tuple[mx.array, list[int]]]:
    """Per sequence: the tapped layers' outputs joined [T, len(layers) * H] (float16), and
    the target's greedy choice after each position (the labels: what it would generate)."""
    from engine.generation.core.speculation.taps import Taps

    taps = Taps(model, layers)
    out = []
    for ids in seqs:
        with taps.capture() as sink:
            logits = model(mx.array(ids, dtype=mx.int32)[None])
        f = mx.concatenate([sink[i][0] for i in layers], axis=-1).astype(mx.float16)
        choice = mx.argmax(logits[0], axis=-1)
        mx.eval(f, choice)
        out.append((f, choice.tolist()))
    return out


def _attend(attn, x: mx.array) -> tuple[mx.array, mx.array, mx.array]:
    """q, k, v [B, heads, T, d] with rope at positions 0..T-1, kv heads repeated."""
    b, t, _ = x.shape
    q = attn.rope(attn.q_proj(x).reshape(b, t, attn.n_heads, -1).transpose(0, 2, 1, 3))
    k = attn.rope(attn.k_proj(x).reshape(b, t, attn.n_kv_heads, -1).transpose(0, 2, 1, 3))
    v = attn.v_proj(x).reshape(b, t, attn.n_kv_heads, -1).transpose(0, 2, 1, 3)
    r = attn.n_heads // attn.n_kv_heads
    return q, mx.repeat(k, r, axis=1), mx.repeat(v, r, axis=1)


def two_steps(head, embed, feats: mx.array, nxt: mx.array) -> tuple[mx.array, mx.array]:
    """The head's output hidden states [B, T, H] at step 1 (position p reads the taps at p
    and the token at p + 1) and step 2 (position i reads step 1's output at i - 1 and the
    token at i + 1, attending to step 1's entries before i and to itself)."""
    layer = head.midlayer
    attn = layer.self_attn
    e = layer.input_layernorm(embed(nxt))
    h1 = head.fc(feats)
    q1, k1, v1 = _attend(attn, mx.concatenate([e, layer.hidden_norm(h1)], axis=-1))
    t = feats.shape[1]
    causal = mx.triu(mx.full((t, t), -1e9), k=1)
    a1 = mx.softmax(q1 @ k1.transpose(0, 1, 3, 2) * attn.scale + causal, axis=-1) @ v1
    o1 = h1 + attn.o_proj(a1.transpose(0, 2, 1, 3).reshape(*h1.shape[:2], -1))
    o1 = o1 + layer.mlp(layer.post_attention_layernorm(o1))
    h2 = mx.concatenate([mx.zeros_like(o1[:, :1]), o1[:, :-1]], axis=1)
    q2, k2, v2 = _attend(attn, mx.concatenate([e, layer.hidden_norm(h2)], axis=-1))
    before = mx.triu(mx.full((t, t), -1e9), k=0)  # step 1's entries strictly before i
    s1 = q2 @ k1.transpose(0, 1, 3, 2) * attn.scale + before
    own = (q2 * k2).sum(-1, keepdims=True) * attn.scale
    w = mx.softmax(mx.concatenate([s1, own], axis=-1), axis=-1)
    a2 = w[..., :t] @ v1 + w[..., t:] * v2
    o2 = h2 + attn.o_proj(a2.transpose(0, 2, 1, 3).reshape(*h2.shape[:2], -1))
    o2 = o2 + layer.mlp(layer.post_attention_layernorm(o2))
    return o1, o2


def batches(data, size: int, rng: random.Random):
    order = list(range(len(data)))
    rng.shuffle(order)
    for at in range(0, len(order) - size + 1, size):
        yield [data[i] for i in order[at : at + size]]


def collate(batch, t2d: dict[int, int]):
    """Right-padded features, next tokens, step-1 and step-2 labels (draft ids; -1: no loss):
    position p's label is the target's greedy choice after p + 1, at every position."""
    t = max(f.shape[0] for f, _ in batch)
    feats, nxt, l1, l2 = [], [], [], []
    for f, (ids, choice) in batch:
        n = f.shape[0]
        feats.append(mx.pad(f, [(0, t - n), (0, 0)]))
        nxt.append(ids[1:] + [0] * (t - n + 1))
        lab = [t2d.get(choice[i + 1], -1) if i + 1 < n - 1 else -1 for i in range(t)]
        l1.append(lab)
        l2.append([-1] + lab[1:])  # step 2 at i predicts what follows i + 1 too; none at 0
    return (mx.stack(feats).astype(mx.float32), mx.array(nxt, dtype=mx.int32),
            mx.array(l1, dtype=mx.int32), mx.array(l2, dtype=mx.int32))


def train(model_dir: Path, out_dir: Path, *, n_prompts: int, tokens: int, minutes: float, draft_vocab: int,
          n_docs: int = 600, seed: int = 0) -> dict:
    from mlx_lm import load
    from mlx_lm.models import llama

    from engine.generation.core.speculation.heads import Eagle3Head

    rng = random.Random(seed)
    started = time.perf_counter()
    data = _answers_cached(model_dir, out_dir, n_prompts, tokens, rng)
    tok_model, tokenizer = load(str(model_dir))
    generated = sum(len(ids) - p for ids, p in data)
    docs = documentation(tokenizer, n_docs)
    data += [(ids, 0) for ids in docs]
    log(f"draft head: {len(data) - len(docs)} answers, {generated} tokens; {len(docs)} documentation chats, "
        f"{sum(map(len, docs))} tokens ({time.perf_counter() - started:.0f} s)")

    config = json.loads((model_dir / "config.json").read_text())
    n = config["num_hidden_layers"]
    layers = (1, n // 2 - 1, n - 4)
    feats = tap_features(tok_model, [ids for ids, _ in data], layers)
    counts = Counter(t for _, choice in feats for t in choice)
    keep = sorted(t for t, _ in counts.most_common(draft_vocab))
    t2d = {t: i for i, t in enumerate(keep)}
    covered = sum(counts[t] for t in keep) / max(1, sum(counts.values()))
    head_config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
                   "hidden_size": config["hidden_size"], "intermediate_size": config["intermediate_size"],
                   "num_attention_heads": config["num_attention_heads"],
                   "num_key_value_heads": config["num_key_value_heads"],
                   "head_dim": config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"],
                   "num_hidden_layers": 1, "rms_norm_eps": config["rms_norm_eps"],
                   "rope_theta": config.get("rope_theta", 10000.0), "rope_scaling": config.get("rope_scaling"),
                   "max_position_embeddings": config.get("max_position_embeddings", 8192), "hidden_act": "silu",
                   "vocab_size": config["vocab_size"], "draft_vocab_size": len(keep),
                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(layers)}}
    args = llama.ModelArgs.from_dict({**head_config, "vocab_size": config["vocab_size"]})
    embed = tok_model.model.embed_tokens
    head = Eagle3Head(args, layers, config["hidden_size"], len(keep), embed, own_embed=False)
    head.lm_head.weight = embed.weight[mx.array(keep)].astype(mx.float32)  # the target's own output rows
    head.norm.weight = tok_model.model.norm.weight.astype(mx.float32)
    head.lm_head.freeze()
    mx.eval(head.parameters())

    train_set = [(f, (ids, choice)) for (f, choice), (ids, _) in zip(feats, data)]

    def loss_fn(h, feats_b, nxt, l1, l2):
        o1, o2 = two_steps(h, embed, feats_b, nxt)
        total, count = mx.array(0.0), mx.array(0.0)
        for o, lab, weight in ((o1, l1, 1.0), (o2, l2, 0.8)):
            flat = lab.reshape(-1)
            where = mx.array(np.nonzero(np.array(flat) >= 0)[0].astype(np.int32))
            rows = o.reshape(-1, o.shape[-1])[where]
            logits = h.lm_head(h.norm(rows))
            total = total + weight * nn.losses.cross_entropy(logits, flat[where], reduction="sum")
            count = count + weight * where.size
        return total / count

    step_fn = nn.value_and_grad(head, loss_fn)
    budget = minutes * 60
    steps_guess = max(1, int(budget / 1.5))
    schedule = optim.join_schedules([optim.linear_schedule(1e-5, 1e-3, 30),
                                     optim.cosine_decay(1e-3, steps_guess, 1e-4)], [30])
    opt = optim.AdamW(learning_rate=schedule, weight_decay=0.01)
    begun, step, losses = time.perf_counter(), 0, []
    while time.perf_counter() - begun < budget:
        for batch in batches(train_set, 8, rng):
            loss, grads = step_fn(head, *collate(batch, t2d))
            opt.update(head, grads)
            mx.eval(head.parameters(), opt.state, loss)
            losses.append(loss.item())
            step += 1
            if step % 25 == 0:
                log(f"draft head: step {step}, loss {sum(losses[-25:]) / 25:.3f}")
            if time.perf_counter() - begun >= budget:
                break

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(head_config, indent=2))
    weights = dict(tree_flatten(head.parameters()))
    weights["d2t"] = mx.array(np.array(keep) - np.arange(len(keep)), dtype=mx.int64)
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights, metadata={"format": "pt"})
    facts = {"answers": len(data) - len(docs), "answer tokens": generated, "documentation chats": len(docs),
             "draft vocabulary": len(keep),
             "labels it covers": f"{covered:.1%}", "steps": step,
             "final loss": f"{sum(losses[-25:]) / max(1, len(losses[-25:])):.3f}",
             "tapped layers": list(layers), "seconds": round(time.perf_counter() - started)}
    (out_dir / "training.json").write_text(json.dumps(facts, indent=2))
    log(f"draft head: wrote {out_dir} ({facts})")
    return facts


def _answers_cached(model_dir: Path, out_dir: Path, n_prompts: int, tokens: int, rng: random.Random):
    """Each prompt answered greedily, then "repeat this" prompts over a quarter of the
    answers; kept beside the head, so a retraining reuses them."""
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    cache = out_dir.with_name(out_dir.name + f".answers-{n_prompts}x{tokens}.json")
    if cache.is_file():
        return [tuple(x) for x in json.loads(cache.read_text())]
    chats = [[{"role": "user", "content": p}] for p in prompts(n_prompts)]
    data = asyncio.run(answers(model_dir, chats, tokens))
    tokenizer = load_tokenizer(model_dir)
    texts = [tokenizer.decode(ids[p:]) for ids, p in data[: max(1, n_prompts // 4)]]
    copies = [[{"role": "user", "content": rng.choice(COPY).format(x=x)}] for x in texts]
    data += asyncio.run(answers(model_dir, copies, tokens))
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(data))
    return data


def documentation(tokenizer, count: int, max_tokens: int = 320, seed: int = 0) -> list[list[int]]:
    """``count`` chats whose answers are docstrings of Python's standard library (prose
    the target reads in one forward each, no generation): more positions to learn from."""
    import ast
    import sysconfig

    found = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 300:
                    name = getattr(node, "name", path.stem)
                    found.append((name, doc))
    random.Random(seed).shuffle(found)
    out = []
    for name, doc in found[:count]:
        chat = [{"role": "user", "content": f"What does {name} in Python do?"}, {"role": "assistant", "content": doc}]
        out.append(tokenizer.apply_chat_template(chat)[:max_tokens])
    return out


def head_dir(model_dir: Path) -> Path:
    from engine.loading.model import cache_root

    return cache_root() / "bench" / f"eagle3-{model_dir.name}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.draft_head_train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="target model (default: embedded SmolLM2-135M, as float32)")
    p.add_argument("--out", help="head directory (default: under the model cache)")
    p.add_argument("--prompts", type=int, default=240, help="chat prompts answered (a quarter more copy prompts)")
    p.add_argument("--tokens", type=int, default=160, help="tokens per answer")
    p.add_argument("--docs", type=int, default=600, help="documentation chats read (no generation)")
    p.add_argument("--minutes", type=float, default=10.0, help="training time")
    p.add_argument("--draft-vocab", type=int, default=8192, help="the head's output vocabulary")
    args = p.parse_args(argv)
    from .common import default_model, prepare_f32

    model_dir = prepare_f32(args.model or default_model(), log)
    train(model_dir, Path(args.out) if args.out else head_dir(model_dir), n_prompts=args.prompts,
          tokens=args.tokens, minutes=args.minutes, draft_vocab=args.draft_vocab, n_docs=args.docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
