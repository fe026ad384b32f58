"""Draft heads that read the target's hidden states: the MTP layers a checkpoint
carries (MiMo's ``model.mtp_layers``) and EAGLE-3 heads given as their own directory.

A head's position ``p`` holds the pair (the target's hidden state at ``p``, the token
at ``p + 1``) and predicts the token at ``p + 2``; chained, it feeds its own output
hidden state in place of the target's. Both share the target's embeddings (EAGLE-3
unless it carries its own) and MTP its output layer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, TypeVar

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

from ....loading.model import LoadedModel
from ....mlx_typed import flatten, load_arrays
from .taps import FINAL

MTP = "mtp"  # --draft-model's word for the checkpoint's own MTP layers
_MTP_PREFIX = "model.mtp_layers.0."
MAX_HEAD_CONFIG_BYTES = 64 << 10


class HeadMismatch(ValueError):
    """The draft head cannot serve this target."""


class DraftHead(nn.Module):
    """``__call__(ids, cache, hidden)`` -> scores over the head's vocabulary, its output
    hidden state kept in ``self.out``; ``features`` turns a captured forward into the
    hidden states the head reads; ``to_target`` maps its chosen ids to the target's."""

    kind: str
    tap_layers: tuple[int, ...] = ()
    tap_final: bool = False

    def __init__(self, embed: Callable[[mx.array], mx.array]):
        super().__init__()
        object.__setattr__(self, "_embed", embed)
        object.__setattr__(self, "out", None)

    def make_cache(self) -> list[KVCache]:
        return [KVCache()]

    @property
    def attention(self) -> nn.Module:
        """The head's one attention layer (its KV is what a row's head cache holds)."""
        raise NotImplementedError

    def features(self, sink: dict[object, mx.array]) -> mx.array:
        raise NotImplementedError

    def to_target(self, ids: mx.array) -> mx.array:
        return ids


class MtpHead(DraftHead):
    """MiMo's MTP layer: both inputs normed, projected to one, a decoder layer, a final
    norm; the target's output layer scores it."""

    kind = MTP
    tap_final = True

    def __init__(self, args, embed: Callable[[mx.array], mx.array], output: Callable[[mx.array], mx.array]):
        from mlx_lm.models import mimo  # the architecture the layer comes from

        super().__init__(embed)
        object.__setattr__(self, "_output", output)
        h, eps = args.hidden_size, args.rms_norm_eps
        self.token_layernorm, self.hidden_layernorm = nn.RMSNorm(h, eps=eps), nn.RMSNorm(h, eps=eps)
        self.input_proj = nn.Linear(2 * h, h, bias=False)
        self.input_layernorm, self.post_attention_layernorm = nn.RMSNorm(h, eps=eps), nn.RMSNorm(h, eps=eps)
        self.self_attn, self.mlp = mimo.Attention(args), mimo.MLP(h, args.intermediate_size)
        self.final_layernorm = nn.RMSNorm(h, eps=eps)

    def features(self, sink: dict[object, mx.array]) -> mx.array:
        return sink[FINAL]

    @property
    def attention(self) -> nn.Module:
        return self.self_attn

    def __call__(self, ids: mx.array, cache=None, hidden: mx.array | None = None) -> mx.array:
        e = self.token_layernorm(self._embed(ids))
        x = self.input_proj(mx.concatenate([self.hidden_layernorm(hidden), e], axis=-1))
        mask = create_attention_mask(x, cache[0] if cache else None)
        x = x + self.self_attn(self.input_layernorm(x), mask, cache[0] if cache else None)
        x = x + self.mlp(self.post_attention_layernorm(x))
        out = self.final_layernorm(x)
        object.__setattr__(self, "out", out)
        return self._output(out)


class Eagle3Head(DraftHead):
    """EAGLE-3: the tapped layers' outputs joined by ``fc``; one decoder layer whose
    attention reads [normed token embedding, normed hidden]; scores over its own (often
    smaller) vocabulary, mapped to the target's by ``d2t``."""

    kind = "eagle3"

    def __init__(self, args: llama.ModelArgs, layers: tuple[int, ...], target_hidden: int,
                 draft_vocab: int, embed: Callable[[mx.array], mx.array], own_embed: bool):
        super().__init__(embed)
        h, eps = args.hidden_size, args.rms_norm_eps
        object.__setattr__(self, "tap_layers", tuple(layers))
        self.fc = nn.Linear(len(layers) * target_hidden, h, bias=False)
        self.midlayer = _Eagle3Layer(args)
        self.norm = nn.RMSNorm(h, eps=eps)
        self.lm_head = nn.Linear(h, draft_vocab, bias=False)
        self.d2t = mx.zeros((draft_vocab,), dtype=mx.int32)
        if own_embed:
            self.embed_tokens = nn.Embedding(args.vocab_size, h)
            object.__setattr__(self, "_embed", self.embed_tokens)

    def features(self, sink: dict[object, mx.array]) -> mx.array:
        return self.fc(mx.concatenate([sink[i] for i in self.tap_layers], axis=-1))

    def to_target(self, ids: mx.array) -> mx.array:
        return ids + self.d2t[ids]

    @property
    def attention(self) -> nn.Module:
        return self.midlayer.self_attn

    def __call__(self, ids: mx.array, cache=None, hidden: mx.array | None = None) -> mx.array:
        assert hidden is not None  # the head reads the target's features (HeadDrafter passes them)
        out = self.midlayer(self._embed(ids), hidden, cache[0] if cache else None)
        object.__setattr__(self, "out", out)
        return self.lm_head(self.norm(out))


class _Eagle3Layer(nn.Module):
    def __init__(self, args: llama.ModelArgs):
        super().__init__()
        h, eps = args.hidden_size, args.rms_norm_eps
        self.input_layernorm, self.hidden_norm = nn.RMSNorm(h, eps=eps), nn.RMSNorm(h, eps=eps)
        self.self_attn = llama.Attention(args)
        attn = self.self_attn
        kv_heads = attn.n_kv_heads
        assert kv_heads is not None  # ModelArgs.__post_init__ fills num_key_value_heads
        attn.q_proj = nn.Linear(2 * h, attn.n_heads * attn.head_dim, bias=args.attention_bias)
        attn.k_proj = nn.Linear(2 * h, kv_heads * attn.head_dim, bias=args.attention_bias)
        attn.v_proj = nn.Linear(2 * h, kv_heads * attn.head_dim, bias=args.attention_bias)
        self.post_attention_layernorm = nn.RMSNorm(h, eps=eps)
        self.mlp = llama.MLP(args)

    def __call__(self, embeds: mx.array, hidden: mx.array, cache) -> mx.array:
        x = mx.concatenate([self.input_layernorm(embeds), self.hidden_norm(hidden)], axis=-1)
        h = hidden + self.self_attn(x, create_attention_mask(x, cache), cache)
        return h + self.mlp(self.post_attention_layernorm(h))


def _target_parts(target: nn.Module) -> tuple[Callable, Callable]:
    embed = target.model.embed_tokens
    output = target.lm_head if "lm_head" in target else embed.as_linear
    return embed, output


def _safetensors(directory: Path) -> dict[str, mx.array]:
    weights: dict[str, mx.array] = {}
    for file in sorted(directory.glob("*.safetensors")):
        weights.update(load_arrays(str(file)))
    return weights


_Head = TypeVar("_Head", bound=DraftHead)


def _finish(head: _Head, weights: dict[str, mx.array], dtype: mx.Dtype, what: str) -> _Head:
    own = dict(flatten(head.parameters()))
    missing, extra = own.keys() - weights.keys(), weights.keys() - own.keys()
    if missing or extra:
        raise HeadMismatch(f"{what}: weights do not match the head "
                           f"(missing {sorted(missing)[:4]}, unexpected {sorted(extra)[:4]})")
    for name, value in weights.items():
        if value.shape != own[name].shape:
            raise HeadMismatch(f"{what}: {name} has shape {tuple(value.shape)}, the head needs "
                               f"{tuple(own[name].shape)}")
    head.load_weights([(k, v.astype(mx.int32) if k == "d2t" else v.astype(dtype)) for k, v in weights.items()])
    mx.eval(head.parameters())
    head.eval()
    return head


def _dtype(target: nn.Module) -> mx.Dtype:
    return target.model.norm.weight.dtype


def load_mtp(target: LoadedModel) -> MtpHead:
    """The checkpoint's first MTP layer (HeadMismatch where it carries none)."""
    if target.model_type != "mimo" or not target.artifact.is_dir():
        raise HeadMismatch(f"model {target.name!r} carries no MTP layers this server reads "
                           "(MiMo-style model.mtp_layers in a safetensors checkpoint)")
    layer = {k[len(_MTP_PREFIX):]: v for k, v in _safetensors(target.artifact).items() if k.startswith(_MTP_PREFIX)}
    if not layer:
        raise HeadMismatch(f"model {target.name!r} carries no MTP layers (no {_MTP_PREFIX}* weights)")
    embed, output = _target_parts(target.model)
    head = MtpHead(target.model.args, embed, output)
    return _finish(head, layer, _dtype(target.model), f"model {target.name!r}'s MTP layer")


def is_eagle3(directory: Path) -> bool:
    config = directory / "config.json"
    if not config.is_file() or config.stat().st_size > MAX_HEAD_CONFIG_BYTES:
        return False
    c = json.loads(config.read_text())
    return "draft_vocab_size" in c or any("eagle3" in a.lower() for a in c.get("architectures") or ())


def load_eagle3(directory: Path, target: LoadedModel) -> Eagle3Head:
    """An EAGLE-3 head for ``target`` (HeadMismatch where it cannot read it)."""
    c = json.loads((directory / "config.json").read_text())
    what = f"draft head {directory.name!r}"
    layers = target.model.model.layers
    n = len(layers)
    ids = tuple((c.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or (1, n // 2 - 1, n - 4))
    if not ids or any(not isinstance(i, int) or not 0 <= i < n for i in ids):
        raise HeadMismatch(f"{what} taps layers {list(ids)}; model {target.name!r} has {n}")
    target_hidden = int(target.model.model.embed_tokens.weight.shape[-1])
    if int(c.get("target_hidden_size") or target_hidden) != target_hidden:
        raise HeadMismatch(f"{what} reads hidden states of width {c['target_hidden_size']}; model "
                           f"{target.name!r}'s are {target_hidden}")
    if int(c.get("vocab_size", target.vocab_size)) > target.vocab_size:
        raise HeadMismatch(f"{what} has a vocabulary of {c['vocab_size']}; model {target.name!r} of "
                           f"{target.vocab_size}")
    args = llama.ModelArgs.from_dict({**c, "model_type": "llama", "num_hidden_layers": 1,
                                      "vocab_size": target.vocab_size})
    weights = {_eagle_name(k): v for k, v in _safetensors(directory).items() if k != "t2d"}
    own_embed = "embed_tokens.weight" in weights
    if not own_embed and args.hidden_size != target_hidden:
        raise HeadMismatch(f"{what} has width {args.hidden_size} and no embeddings of its own; model "
                           f"{target.name!r}'s are {target_hidden} wide")
    embed, _ = _target_parts(target.model)
    head = Eagle3Head(args, ids, target_hidden, int(c.get("draft_vocab_size") or target.vocab_size), embed, own_embed)
    weights.setdefault("d2t", mx.zeros((head.lm_head.weight.shape[0],), dtype=mx.int32))
    return _finish(head, weights, _dtype(target.model), what)


def _eagle_name(key: str) -> str:
    key = key.removeprefix("model.")
    return "midlayer." + key[len("layers.0."):] if key.startswith("layers.0.") else key


def load_head(source: str, target: LoadedModel) -> DraftHead | None:
    """The head ``--draft-model`` names (``mtp``: the checkpoint's own; an EAGLE-3
    directory), or None where it names a draft model."""
    if source != MTP and not is_eagle3(Path(source)):
        return None
    if not target.traits.can_roll_back:
        raise HeadMismatch(f"model {target.name!r} keeps caches that cannot roll back (sliding windows or "
                           "recurrent state), so it cannot verify drafts")
    head = load_mtp(target) if source == MTP else load_eagle3(Path(source), target)
    object.__setattr__(head, "name", MTP if source == MTP else Path(source).name)
    return head
