"""A generation model's memory facts as it is served: its KV as requests hold it
(quantized under ``--kv-bits``, refused at load where it cannot be), attention as the
kernels run it, a vision-language model's tower and projector, and a draft model beside it."""

from __future__ import annotations

from dataclasses import replace

from ..caches.quantized_kv import check_kv_bits, make_caches
from ..loading.model import LoadedModel
from ..mlx_typed import flatten
from .facts import ModelMemoryFacts, blockwise_attention, facts_from_model, with_draft


def served_facts(loaded: LoadedModel, kv_bits: int = 0) -> ModelMemoryFacts:
    if kv_bits:
        check_kv_bits(loaded.model, kv_bits, loaded.name)
    facts = facts_from_model(loaded.model, loaded.config, lambda model: make_caches(model, kv_bits),
                             blockwise_attention=blockwise_attention(loaded))
    if loaded.vision is None:
        return facts
    tower = sum(v.nbytes for _, v in flatten(loaded.vision.vlm.parameters()))
    return replace(facts, weights_bytes=facts.weights_bytes + tower)  # an image's tokens are prompt tokens


def with_served_draft(facts: ModelMemoryFacts, draft: LoadedModel) -> ModelMemoryFacts:
    """``facts`` with a draft model's weights, caches (float KV) and workspace added."""
    draft_facts = facts_from_model(draft.model, draft.config, blockwise_attention=blockwise_attention(draft))
    return with_draft(facts, draft_facts)


def with_served_head(facts: ModelMemoryFacts, head) -> ModelMemoryFacts:
    """``facts`` with a draft head's weights and its one attention layer's float KV."""
    keys = head.attention.k_proj.weight
    per_token = 2 * keys.shape[0] * keys.dtype.size
    return replace(facts, weights_bytes=facts.weights_bytes + sum(v.nbytes for _, v in flatten(head.parameters())),
                   kv_bytes_per_token_per_layer=(*facts.kv_bytes_per_token_per_layer, per_token),
                   window_per_layer=(*facts.window_per_layer, None),
                   state_bytes_per_layer=(*facts.state_bytes_per_layer, 0) if facts.state_bytes_per_layer else ())
