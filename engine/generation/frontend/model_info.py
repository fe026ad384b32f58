"""What a generation engine says about its model (GetModelInfo); each flag states what
the engine does with this model as loaded."""

from __future__ import annotations

from ...adapters.info import AdapterInfo
from ...description import (
    Capabilities,
    ChatFacts,
    GraphDescriptor,
    MediaSupport,
    ModelDescription,
    ModelKind,
    NativeDraft,
    Speculation,
)
from ...hardware.device import backend_name, blas_name
from ...loading.model import LoadedModel
from ...requests import SpeculationMode


def describe_generation(m: LoadedModel, speculation: Speculation, response_formats: tuple[str, ...], chat: ChatFacts,
                        adapters: tuple[AdapterInfo, ...], max_adapters: int, kv_bits: int = 0, *,
                        taps: bool = False, native_draft: NativeDraft | None = None) -> ModelDescription:
    """``taps``: the model's hidden layers can feed a draft head; ``native_draft``: the
    head its checkpoint carries, when it is loaded."""
    return ModelDescription(
        name=m.name, kind=ModelKind.GENERATION,
        descriptor=GraphDescriptor(f"mlx-lm/{m.model_type}", backend_name(), "mlx-lm/forward-v1",
                                   "mlx-lm/kv-cache-v1", str(m.artifact)),
        capabilities=Capabilities(prefill_bounded_workspace=True, speculation=speculation,
                                  hidden_layer_taps=taps, native_draft=native_draft,
                                  response_formats=response_formats, chat=chat,
                                  media=MediaSupport(m.vision.media_input, video=m.vision.video is not None,
                                                     audio=m.vision.audio is not None)
                                  if m.vision is not None else None),
        context_length=m.context_length, vocab_size=m.vocab_size,
        eos_token_ids=tuple(sorted(m.eos_ids)), has_chat_template=m.has_chat_template,
        dtype=m.dtype, blas=blas_name(), embedding_dimensions=0, source=m.source,
        adapters=adapters, max_adapters=max_adapters, kv_cache_dtype=f"int{kv_bits}" if kv_bits else kv_dtype(m))


def kv_dtype(m: LoadedModel) -> str:
    """The dtype the model's activations, and so its float KV, run in."""
    from ...memory.facts import activation_dtype

    return str(activation_dtype(m.model)).split(".")[-1]


def speculation_facts(rolls_back: bool, draft_model: str, default: SpeculationMode,
                      grammar_proposals: bool) -> Speculation:
    """Speculation needs caches that roll back."""
    if not rolls_back:
        return Speculation()
    modes = (SpeculationMode.NGRAM, SpeculationMode.DRAFT) if draft_model else (SpeculationMode.NGRAM,)
    return Speculation(adapters=True, logprobs=True, external_tokens=True, grammar_proposals=grammar_proposals,
                       modes=(SpeculationMode.OFF, *modes),
                       default_mode=default if default in modes else SpeculationMode.OFF, draft_model=draft_model)
