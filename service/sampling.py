"""SamplingParams -> SamplingOptions: translation only; the engine checks the ranges."""

from __future__ import annotations

from engine.errors import InvalidRequest
from engine.requests import (
    DRY_BREAKERS,
    DryOptions,
    DynamicTemperature,
    MirostatOptions,
    SamplerOrder,
    SamplingOptions,
    XtcOptions,
)

from .gen.mlxgrpc.v1 import generation_pb2 as gen_pb

_ORDER = {
    gen_pb.SAMPLER_ORDER_UNSPECIFIED: SamplerOrder.DEFAULT,
    gen_pb.SAMPLER_ORDER_DEFAULT: SamplerOrder.DEFAULT,
    gen_pb.SAMPLER_ORDER_LLAMA_CPP: SamplerOrder.LLAMA_CPP,
}


def sampling_options(s: gen_pb.SamplingParams) -> SamplingOptions:
    defaults = SamplingOptions()
    return SamplingOptions(
        temperature=s.temperature if s.HasField("temperature") else defaults.temperature,
        top_p=s.top_p if s.HasField("top_p") else defaults.top_p,
        top_k=s.top_k, min_p=s.min_p,
        repetition_penalty=s.repetition_penalty if s.HasField("repetition_penalty") else 1.0,
        repetition_context_size=s.repetition_context_size or defaults.repetition_context_size,
        presence_penalty=s.presence_penalty, frequency_penalty=s.frequency_penalty,
        logit_bias=dict(s.logit_bias), seed=s.seed if s.HasField("seed") else None,
        typical_p=s.typical_p if s.HasField("typical_p") else defaults.typical_p,
        top_n_sigma=s.top_n_sigma,
        xtc=_xtc(s.xtc) if s.HasField("xtc") else None,
        dry=_dry(s.dry) if s.HasField("dry") else None,
        mirostat=_mirostat(s.mirostat) if s.HasField("mirostat") else None,
        dynamic_temperature=_dynamic(s.dynamic_temperature) if s.HasField("dynamic_temperature") else None,
        order=_ORDER.get(s.sampler_order, SamplerOrder.DEFAULT),
        bad_words=tuple(s.bad_words), allowed_token_ids=tuple(s.allowed_token_ids))


def _xtc(x: gen_pb.XtcParams) -> XtcOptions:
    return XtcOptions(probability=x.probability,
                      threshold=x.threshold if x.HasField("threshold") else XtcOptions.threshold)


def _dry(d: gen_pb.DryParams) -> DryOptions:
    if d.use_no_breakers and d.sequence_breakers:
        raise InvalidRequest("sampling.dry.use_no_breakers", "cannot be set with sequence_breakers")
    breakers = () if d.use_no_breakers else (tuple(d.sequence_breakers) or DRY_BREAKERS)
    return DryOptions(multiplier=d.multiplier, base=d.base if d.HasField("base") else DryOptions.base,
                      allowed_length=d.allowed_length if d.HasField("allowed_length") else DryOptions.allowed_length,
                      penalty_last_n=d.penalty_last_n, sequence_breakers=breakers)


def _mirostat(m: gen_pb.MirostatParams) -> MirostatOptions:
    return MirostatOptions(tau=m.tau if m.HasField("tau") else MirostatOptions.tau,
                           eta=m.eta if m.HasField("eta") else MirostatOptions.eta)


def _dynamic(t: gen_pb.DynamicTemperature) -> DynamicTemperature:
    return DynamicTemperature(range=t.range,
                              exponent=t.exponent if t.HasField("exponent") else DynamicTemperature.exponent)
