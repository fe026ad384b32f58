"""SMG's worker contracts' messages <-> engine types. Translation only.

The MLX and vLLM contracts share their sampling fields' names and their replies' shapes, so
replies are built over either message module. Defaults follow the contracts' other workers:
unset temperature is 1.0; zero ``top_p`` and ``repetition_penalty`` mean unset.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Mapping

from engine.description import ModelDescription
from engine.errors import InvalidRequest
from engine.events import Delta, Event, Finished, FinishReason, PromptLogprobs, Started, TokenLogprob
from engine.requests import GenerationRequest, SamplingOptions, StopOptions, TextPrompt, TokenPrompt
from engine.validation import RequestCounts

SERVER_TYPE = "mlx-grpc"
OPENAI_TEMPERATURE = 1.0
_FINISH = {FinishReason.LENGTH: "length", FinishReason.STOP: "stop", FinishReason.EOS: "stop",
           FinishReason.CANCELLED: "abort", FinishReason.ERROR: "abort"}
# Our API's field paths -> the contract's, for BadRequest violations (prefix match).
_FIELDS = (("sampling.", "sampling_params."), ("stopping.", "sampling_params."),
           ("tokens.ids", "tokenized.input_ids"), ("top_logprobs", "sampling_params.logprobs"),
           ("prompt_logprobs", "sampling_params.prompt_logprobs"))


def generation_request(msg) -> GenerationRequest:
    """Either contract's GenerateRequest, as far as the MLX contract goes (the vLLM one adds to it)."""
    sp = msg.sampling_params
    logprobs = sp.logprobs if sp.HasField("logprobs") else None
    prompt_logprobs = "prompt_logprobs" in sp.DESCRIPTOR.fields_by_name and sp.HasField("prompt_logprobs")
    return GenerationRequest(
        prompt=_prompt(msg), request_id=msg.request_id, sampling=_sampling(sp),
        stopping=StopOptions(max_tokens=sp.max_tokens if sp.HasField("max_tokens") else None,
                             stop_token_ids=tuple(sp.stop_token_ids), ignore_eos=sp.ignore_eos),
        logprobs=logprobs is not None, top_logprobs=logprobs or 0,
        prompt_logprobs=sp.prompt_logprobs if prompt_logprobs else None)  # the vLLM contract's only


def generation_counts(msg) -> RequestCounts:
    """The repeated fields' sizes, measured on the wire message (in our API's field names)."""

    sp = msg.sampling_params
    return RequestCounts(
        prompt_ids=len(msg.tokenized.input_ids) if msg.WhichOneof("input") == "tokenized" else 0,
        stop_token_ids=len(sp.stop_token_ids), logit_bias=len(sp.logit_bias),
        stop_strings=len(getattr(sp, "stop", ())))


def _prompt(msg):
    which = msg.WhichOneof("input")
    if which == "tokenized":
        return TokenPrompt(tuple(msg.tokenized.input_ids))
    if which == "text":
        return TextPrompt(msg.text)
    raise InvalidRequest("input", "set tokenized or text")


def _sampling(sp) -> SamplingOptions:
    return SamplingOptions(
        temperature=sp.temperature if sp.HasField("temperature") else OPENAI_TEMPERATURE,
        top_p=sp.top_p or 1.0, top_k=sp.top_k, min_p=sp.min_p,
        repetition_penalty=sp.repetition_penalty or 1.0,
        presence_penalty=sp.presence_penalty, frequency_penalty=sp.frequency_penalty,
        logit_bias=dict(sp.logit_bias), seed=sp.seed if sp.HasField("seed") else None)


def in_contract_terms(error: BaseException) -> BaseException:
    """An invalid-field error renamed to the contract's field path; others unchanged."""
    if not isinstance(error, InvalidRequest):
        return error
    for ours, theirs in _FIELDS:
        if error.field.startswith(ours):
            return InvalidRequest(theirs + error.field[len(ours):], error.description)
    return error


class Responses:
    """One request's engine events -> the contract's GenerateResponse messages (choice ``index``).
    Prompt logprobs go with the first chunk of a streamed sample, else with its complete."""

    def __init__(self, pb: ModuleType, stream: bool, index: int = 0):
        self.pb, self.stream, self.index = pb, stream, index
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.output_ids: list[int] = []
        self.logprobs = pb.OutputLogProbs()  # every token's, for an unstreamed request
        self.input_logprobs = None  # the prompt's, until a message carries them

    def add(self, event: Event):
        """The message ``event`` makes, or None when it makes none (yet)."""
        if isinstance(event, Started):
            self.prompt_tokens, self.cached_tokens = event.prompt_tokens, event.cached_tokens
            return None
        if isinstance(event, PromptLogprobs):
            self.input_logprobs = input_logprobs(self.pb, event)
            return None
        if isinstance(event, Delta):
            return self._chunk(event) if event.token_ids else None
        assert isinstance(event, Finished)
        return self._complete(event)

    def _chunk(self, delta: Delta):
        self.output_ids.extend(delta.token_ids)
        logprobs = output_logprobs(self.pb, delta.logprobs)
        if not self.stream:
            self.logprobs.MergeFrom(logprobs)
            return None
        return self.pb.GenerateResponse(chunk=self.pb.GenerateStreamChunk(
            token_ids=delta.token_ids, prompt_tokens=self.prompt_tokens,
            completion_tokens=len(self.output_ids), cached_tokens=self.cached_tokens,
            output_logprobs=logprobs if delta.logprobs else None, index=self.index, **self._take_input()))

    def _take_input(self) -> dict:
        """The prompt's logprobs as the one message that carries them takes them (none: nothing,
        so a contract without the field is never handed it)."""
        taken, self.input_logprobs = self.input_logprobs, None
        return {"input_logprobs": taken} if taken is not None else {}

    def _complete(self, e: Finished):
        complete = self.pb.GenerateComplete(
            output_ids=() if self.stream else self.output_ids, finish_reason=_FINISH[e.reason],
            prompt_tokens=e.usage.prompt_tokens, completion_tokens=e.usage.completion_tokens,
            cached_tokens=e.usage.cached_tokens, index=self.index,
            output_logprobs=self.logprobs if self.logprobs.token_ids and not self.stream else None,
            **self._take_input())
        if e.stop_token_id is not None:
            complete.matched_stop_token_id = e.stop_token_id
        elif e.stop_sequence and "matched_stop_str" in self.pb.GenerateComplete.DESCRIPTOR.fields_by_name:
            complete.matched_stop_str = e.stop_sequence
        return self.pb.GenerateResponse(complete=complete)


def output_logprobs(pb: ModuleType, logprobs: tuple[TokenLogprob, ...]):
    return pb.OutputLogProbs(
        token_ids=[lp.token_id for lp in logprobs], token_logprobs=[lp.logprob for lp in logprobs],
        top_logprobs=[pb.TopLogProbs(token_ids=[t.token_id for t in lp.top],
                                     values=[t.logprob for t in lp.top]) for lp in logprobs])


def input_logprobs(pb: ModuleType, event: PromptLogprobs):
    """Every prompt token, the first without a value (nothing precedes it); alternatives when asked."""
    tops = any(lp.top for lp in event.tokens)
    return pb.InputLogProbs(
        token_ids=[event.first_token_id, *(lp.token_id for lp in event.tokens)],
        token_logprobs=[pb.InputTokenLogProb(), *(pb.InputTokenLogProb(value=lp.logprob) for lp in event.tokens)],
        top_logprobs=[pb.TopLogProbs(), *(pb.TopLogProbs(token_ids=[t.token_id for t in lp.top],
                                                         values=[t.logprob for t in lp.top])
                                          for lp in event.tokens)] if tops else [])


def model_info(message: type, d: ModelDescription, files: Mapping[str, bytes], max_prompt_tokens: int,
               path: bool = True):
    """The model's facts as ``message`` (either contract's GetModelInfoResponse); type,
    architectures and special ids from its config.json. ``path`` False puts the served name where
    the model's path goes: SMG needs a model_path to register the model (it then fetches the
    tokenizer with GetTokenizer when no such path exists where it runs)."""
    config = json.loads(files.get("config.json", b"{}"))
    return message(
        model_path=d.source if path else d.name, is_generation=d.capabilities.generation,
        max_context_length=d.context_length,
        vocab_size=d.vocab_size, served_model_name=d.name, model_type=str(config.get("model_type", "")),
        architectures=[str(a) for a in config.get("architectures") or ()],
        eos_token_ids=d.eos_token_ids, pad_token_id=_token_id(config, "pad_token_id"),
        bos_token_id=_token_id(config, "bos_token_id"), max_req_input_len=max_prompt_tokens)


def _token_id(config: Mapping, key: str) -> int:
    value = config.get(key)
    return value if isinstance(value, int) and value >= 0 else 0
