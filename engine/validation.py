"""Checks a generation request against the model's facts and the server's limits.

Each failure raises ``InvalidRequest`` naming the field by its path in the API
(e.g. ``sampling.top_p``), so the service can report it as a BadRequest violation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import InvalidRequest
from .requests import GenerationRequest, SamplingOptions, StopOptions


@dataclass(frozen=True)
class Limits:
    """Per-request limits (configurable from the command line)."""

    max_tokens: int = 4096  # cap on generated tokens per request
    max_prompt_tokens: int = 0  # 0: the model's context length
    max_top_logprobs: int = 20
    max_stop_strings: int = 16
    max_stop_length: int = 256
    max_logit_bias: int = 1024
    max_request_id_length: int = 128
    max_embed_inputs: int = 256


def validate_request(request: GenerationRequest, vocab_size: int, limits: Limits) -> None:
    """Checks everything that does not need the tokenized prompt."""
    if len(request.request_id) > limits.max_request_id_length:
        raise InvalidRequest("request_id", f"must be at most {limits.max_request_id_length} characters")
    if request.top_logprobs < 0 or request.top_logprobs > limits.max_top_logprobs:
        raise InvalidRequest("top_logprobs", f"must be between 0 and {limits.max_top_logprobs}")
    _check_sampling(request.sampling, vocab_size, limits)
    _check_stopping(request.stopping, vocab_size, limits)


def check_token_ids(field: str, ids, vocab_size: int) -> None:
    for i in ids:
        if not 0 <= i < vocab_size:
            raise InvalidRequest(field, f"token id {i} is outside the vocabulary [0, {vocab_size})")


def _finite(field: str, value: float) -> None:
    if not math.isfinite(value):
        raise InvalidRequest(field, "must be a finite number")


def _check_sampling(s: SamplingOptions, vocab_size: int, limits: Limits) -> None:
    _finite("sampling.temperature", s.temperature)
    if s.temperature < 0:
        raise InvalidRequest("sampling.temperature", "must be >= 0")
    _finite("sampling.top_p", s.top_p)
    if not 0 < s.top_p <= 1:
        raise InvalidRequest("sampling.top_p", "must be in (0, 1]")
    if s.top_k < 0:
        raise InvalidRequest("sampling.top_k", "must be >= 0")
    _finite("sampling.min_p", s.min_p)
    if not 0 <= s.min_p < 1:
        raise InvalidRequest("sampling.min_p", "must be in [0, 1)")
    _finite("sampling.repetition_penalty", s.repetition_penalty)
    if s.repetition_penalty <= 0:
        raise InvalidRequest("sampling.repetition_penalty", "must be > 0")
    if s.repetition_context_size < 0:
        raise InvalidRequest("sampling.repetition_context_size", "must be >= 0")
    _finite("sampling.presence_penalty", s.presence_penalty)
    _finite("sampling.frequency_penalty", s.frequency_penalty)
    if len(s.logit_bias) > limits.max_logit_bias:
        raise InvalidRequest("sampling.logit_bias", f"at most {limits.max_logit_bias} entries")
    check_token_ids("sampling.logit_bias", s.logit_bias.keys(), vocab_size)
    for value in s.logit_bias.values():
        _finite("sampling.logit_bias", value)


def _check_stopping(s: StopOptions, vocab_size: int, limits: Limits) -> None:
    if s.max_tokens is not None and not 1 <= s.max_tokens <= limits.max_tokens:
        raise InvalidRequest("stopping.max_tokens", f"must be between 1 and {limits.max_tokens}")
    if s.min_tokens < 0:
        raise InvalidRequest("stopping.min_tokens", "must be >= 0")
    if s.max_tokens is not None and s.min_tokens > s.max_tokens:
        raise InvalidRequest("stopping.min_tokens", "must not exceed max_tokens")
    if len(s.stop) > limits.max_stop_strings:
        raise InvalidRequest("stopping.stop", f"at most {limits.max_stop_strings} stop strings")
    if any(len(x) > limits.max_stop_length for x in s.stop):
        raise InvalidRequest("stopping.stop", f"each stop string at most {limits.max_stop_length} characters")
    if len(s.stop_token_ids) > limits.max_logit_bias:
        raise InvalidRequest("stopping.stop_token_ids", f"at most {limits.max_logit_bias} ids")
    check_token_ids("stopping.stop_token_ids", s.stop_token_ids, vocab_size)
