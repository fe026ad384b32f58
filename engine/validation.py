"""Checks a request against the model's facts and the server's limits, before any work.

Invariants: failures raise ``InvalidRequest`` naming the API field path; sizes are checked
cheapest first, and nothing is rendered or tokenized before they pass.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Iterable

from .errors import InvalidRequest
from .limits import BYTES_PER_TOKEN, MAX_JSON_DEPTH, Limits  # noqa: F401 - re-exported: the checks' limits
from .requests import ChatPrompt, GenerationRequest, SamplingOptions, StopOptions, TextPrompt, TokenPrompt
from .tenancy import MAX_PRIORITY
from .vision.audio import check_audios
from .vision.images import check_images
from .vision.video import check_videos

MAX_PROMPT_ALTERNATIVES = 20  # prompt_logprobs: most alternatives per prompt token
MAX_EXACT_INT = 2**53 - 1  # the seed's bound on counts and positions (exact in a float64)


@dataclass(frozen=True)
class RequestCounts:
    """A request's repeated fields' sizes, measured before anything is converted or built."""

    prompt_ids: int = 0
    chat_messages: int = 0
    stop_strings: int = 0
    stop_token_ids: int = 0
    logit_bias: int = 0
    tools: int = 0
    template_kwargs: int = 0
    template_kwargs_bytes: int = 0  # UTF-8 bytes of the values (JSON texts) together
    message_parts: tuple[int, int] = (0, 0)  # (most parts of one message, that message's index)
    message_tool_calls: tuple[int, int] = (0, 0)  # (most tool calls of one message, its index)
    prediction_ids: int = 0


def is_exact_int(value: object) -> bool:
    """A real ``int`` (not ``bool`` or ``float``) within +-MAX_EXACT_INT."""
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_EXACT_INT <= value <= MAX_EXACT_INT


def validate_request(request: GenerationRequest, vocab_size: int, limits: Limits, context_length: int) -> None:
    """Checks everything that does not need the tokenized prompt."""
    limits = limits.for_context(context_length)
    check_ids(limits, request_id=request.request_id, session_id=request.session_id)
    check_counts(counts_of(request), limits)
    check_priority(request.priority)
    _check_prompt_bytes(request.prompt, limits)
    if isinstance(request.prompt, ChatPrompt) and request.prompt.has_media:
        check_images(request.prompt, limits)
        check_videos(request.prompt, limits)
        check_audios(request.prompt, limits)
    if request.top_logprobs < 0 or request.top_logprobs > limits.max_top_logprobs:
        raise InvalidRequest("top_logprobs", f"must be between 0 and {limits.max_top_logprobs}")
    check_prompt_logprobs(request, len(request.prompt.ids) if isinstance(request.prompt, TokenPrompt) else None,
                          limits)
    if not 1 <= request.n <= limits.max_choices:
        raise InvalidRequest("n", f"must be between 1 and {limits.max_choices}")
    _check_sampling(request.sampling, vocab_size)
    _check_stopping(request.stopping, vocab_size, limits, context_length)


def check_prompt_logprobs(request: GenerationRequest, prompt_tokens: int | None, limits: Limits) -> None:
    """0 to ``MAX_PROMPT_ALTERNATIVES`` alternatives, a prompt without images (its prefill is not scored),
    and, once the prompt's length is known, prompt tokens x (1 + alternatives) within the limit."""
    k = request.prompt_logprobs
    if k is None:
        return
    if not 0 <= k <= MAX_PROMPT_ALTERNATIVES:
        raise InvalidRequest("prompt_logprobs", f"must be between 0 and {MAX_PROMPT_ALTERNATIVES}")
    if isinstance(request.prompt, ChatPrompt) and request.prompt.has_media:
        raise InvalidRequest("prompt_logprobs", "is not supported for prompts with images, videos or audio")
    if prompt_tokens is not None and prompt_tokens * (1 + k) > limits.max_prompt_logprobs:
        raise InvalidRequest("prompt_logprobs", f"{prompt_tokens} prompt tokens x {1 + k} values exceed the "
                                                f"server's limit of {limits.max_prompt_logprobs}")


def check_ids(limits: Limits, **ids: str) -> None:
    """Identifiers a client chooses (model, request_id, session_id) are short."""
    for field, value in ids.items():
        at_most(field, len(value), limits.max_request_id_length, "characters")


def check_priority(priority: int) -> None:
    if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidRequest("priority", f"must be between {-MAX_PRIORITY} and {MAX_PRIORITY}")


def check_counts(counts: RequestCounts, limits: Limits) -> None:
    """Counts against limits already sized by ``Limits.for_context``."""
    at_most("tokens.ids", counts.prompt_ids, limits.max_prompt_tokens, "token ids")
    at_most("chat.messages", counts.chat_messages, limits.max_chat_messages, "messages")
    at_most("prediction.tokens.ids", counts.prediction_ids, limits.max_prediction_tokens, "token ids")
    at_most("stopping.stop", counts.stop_strings, limits.max_stop_strings, "stop strings")
    at_most("stopping.stop_token_ids", counts.stop_token_ids, limits.max_stop_token_ids, "ids")
    at_most("sampling.logit_bias", counts.logit_bias, limits.max_logit_bias, "entries")
    at_most("chat.tools", counts.tools, limits.max_tools, "tools")
    at_most("chat.template_kwargs", counts.template_kwargs, limits.max_template_kwargs, "entries")
    if counts.template_kwargs_bytes > limits.max_json_bytes:
        raise InvalidRequest("chat.template_kwargs", f"at most {limits.max_json_bytes} bytes of JSON together")
    parts, at = counts.message_parts
    at_most(f"chat.messages[{at}].parts", parts, limits.max_message_parts, "parts")
    calls, at = counts.message_tool_calls
    at_most(f"chat.messages[{at}].tool_calls", calls, limits.max_tool_calls, "tool calls")


def counts_of(request: GenerationRequest) -> RequestCounts:
    prompt = request.prompt
    chat = prompt if isinstance(prompt, ChatPrompt) else None
    return RequestCounts(
        prompt_ids=len(prompt.ids) if isinstance(prompt, TokenPrompt) else 0,
        chat_messages=len(chat.messages) if chat else 0,
        stop_strings=len(request.stopping.stop), stop_token_ids=len(request.stopping.stop_token_ids),
        logit_bias=len(request.sampling.logit_bias), tools=len(chat.tools) if chat else 0,
        template_kwargs=len(chat.template_kwargs) if chat else 0,
        message_parts=most((len(m.parts) for m in chat.messages) if chat else ()),
        message_tool_calls=most((len(m.tool_calls) for m in chat.messages) if chat else ()),
        prediction_ids=len(request.prediction.token_ids) if request.prediction else 0)


def most(counts: Iterable[int]) -> tuple[int, int]:
    """(the largest of ``counts``, its index); (0, 0) when there are none."""
    return max(((count, i) for i, count in enumerate(counts)), default=(0, 0))


def parse_json(field: str, text: str, max_bytes: int | None, max_depth: int = MAX_JSON_DEPTH) -> object:
    """``text`` parsed as JSON after its size is checked (None: the caller checked it), refused by
    name when it is not JSON or nests deeper than ``max_depth`` (never a RecursionError)."""
    if max_bytes is not None:
        check_text_bytes(field, (text,), max_bytes)
    try:
        value = json.loads(text)
    except RecursionError:
        raise InvalidRequest(field, f"nests deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise InvalidRequest(field, f"is not JSON: {exc}") from None
    if json_depth(value) > max_depth:
        raise InvalidRequest(field, f"nests deeper than {max_depth} levels")
    return value


def json_depth(value: object) -> int:
    """How deep JSON containers nest; iterative, so any depth is measured without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def at_most(field: str, count: int, limit: int, what: str) -> None:
    if count > limit:
        raise InvalidRequest(field, f"at most {limit} {what}, got {count}")


def check_text_bytes(field: str, texts: Iterable[str], limit: int) -> None:
    """The UTF-8 size of ``texts`` together is at most ``limit`` bytes."""
    total = 0
    for text in texts:
        total += len(text) if len(text) > limit else len(text.encode("utf-8", "surrogatepass"))
        if total > limit:
            raise InvalidRequest(field, f"at most {limit} bytes of UTF-8 text")


def _check_prompt_bytes(prompt, limits: Limits) -> None:
    if isinstance(prompt, TextPrompt):
        check_text_bytes("text", (prompt.text,), limits.max_prompt_bytes)
    elif isinstance(prompt, ChatPrompt):
        texts = (text for m in prompt.messages for text in (m.role, m.content, m.reasoning, m.tool_call_id,
                                                             *(c.arguments for c in m.tool_calls)))
        check_text_bytes("chat.messages", texts, limits.max_prompt_bytes)
        tools = (text for t in prompt.tools for text in (t.name, t.description, t.parameters))
        check_text_bytes("chat.tools", tools, limits.max_prompt_bytes)


def check_token_ids(field: str, ids, vocab_size: int) -> None:
    for i in ids:
        if not 0 <= i < vocab_size:
            raise InvalidRequest(field, f"token id {i} is outside the vocabulary [0, {vocab_size})")


def _finite(field: str, value: float) -> None:
    if not math.isfinite(value):
        raise InvalidRequest(field, "must be a finite number")


def _check_sampling(s: SamplingOptions, vocab_size: int) -> None:
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
    check_token_ids("sampling.logit_bias", s.logit_bias.keys(), vocab_size)
    for value in s.logit_bias.values():
        _finite("sampling.logit_bias", value)
    _check_samplers(s, vocab_size)


MAX_BAD_WORDS = 64
MAX_BAD_WORD_CHARS = 1024  # before tokenizing; each word's tokens (at most 16) are counted where it is tokenized
MAX_DRY_BREAKERS = 16
MAX_DRY_BREAKER_CHARS = 64
MAX_DRY_WINDOW = 4096  # the most recent tokens DRY searches (penalty_last_n 0 asks for this many): a step's cost


def _check_samplers(s: SamplingOptions, vocab_size: int) -> None:
    """typical_p, top_n_sigma, XTC, DRY, mirostat, dynamic temperature, bad words, allowed ids."""
    at_most("sampling.bad_words", len(s.bad_words), MAX_BAD_WORDS, "words")
    if any(len(w) > MAX_BAD_WORD_CHARS for w in s.bad_words):
        raise InvalidRequest("sampling.bad_words", f"each word at most {MAX_BAD_WORD_CHARS} characters")
    at_most("sampling.allowed_token_ids", len(s.allowed_token_ids), vocab_size, "ids (the vocabulary's size)")
    check_token_ids("sampling.allowed_token_ids", s.allowed_token_ids, vocab_size)
    _in_range("sampling.typical_p", s.typical_p, 0, 1, low_open=True)
    _in_range("sampling.top_n_sigma", s.top_n_sigma, 0)
    if s.xtc is not None:
        _in_range("sampling.xtc.probability", s.xtc.probability, 0, 1)
        _in_range("sampling.xtc.threshold", s.xtc.threshold, 0, 1, low_open=True)
    if s.dry is not None:
        d = s.dry
        _in_range("sampling.dry.multiplier", d.multiplier, 0)
        _in_range("sampling.dry.base", d.base, 1)
        if d.allowed_length < 1:
            raise InvalidRequest("sampling.dry.allowed_length", "must be >= 1")
        if not 0 <= d.penalty_last_n <= MAX_DRY_WINDOW:
            raise InvalidRequest("sampling.dry.penalty_last_n", f"must be in [0, {MAX_DRY_WINDOW}]")
        at_most("sampling.dry.sequence_breakers", len(d.sequence_breakers), MAX_DRY_BREAKERS, "breakers")
        if any(len(b) > MAX_DRY_BREAKER_CHARS for b in d.sequence_breakers):
            raise InvalidRequest("sampling.dry.sequence_breakers", f"each at most {MAX_DRY_BREAKER_CHARS} characters")
    if s.mirostat is not None:
        _in_range("sampling.mirostat.tau", s.mirostat.tau, 0, low_open=True)
        _in_range("sampling.mirostat.eta", s.mirostat.eta, 0, 1, low_open=True)
    if s.dynamic_temperature is not None:
        _in_range("sampling.dynamic_temperature.range", s.dynamic_temperature.range, 0)
        _in_range("sampling.dynamic_temperature.exponent", s.dynamic_temperature.exponent, 0, low_open=True)


def _in_range(field: str, value: float, low: float, high: float | None = None, *, low_open: bool = False) -> None:
    """A finite ``value`` in [low, high] ((low, high] with ``low_open``; no upper bound without ``high``)."""
    _finite(field, value)
    if value < low or (low_open and value == low) or (high is not None and value > high):
        bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]" if high is not None else None
        raise InvalidRequest(field, f"must be in {bounds}" if bounds
                             else f"must be {'>' if low_open else '>='} {low:g}")


def _check_stopping(s: StopOptions, vocab_size: int, limits: Limits, context_length: int) -> None:
    longest = min(limits.max_tokens, context_length - 1)
    if s.max_tokens is not None and not 1 <= s.max_tokens <= limits.max_tokens:
        raise InvalidRequest("stopping.max_tokens", f"must be between 1 and {limits.max_tokens}")
    if not 0 <= s.min_tokens <= longest:
        raise InvalidRequest("stopping.min_tokens", f"must be between 0 and {longest} (the most tokens "
                                                    "a request may generate on this model)")
    if s.max_tokens is not None and s.min_tokens > s.max_tokens:
        raise InvalidRequest("stopping.min_tokens", "must not exceed max_tokens")
    if any(len(x) > limits.max_stop_length for x in s.stop):
        raise InvalidRequest("stopping.stop", f"each stop string at most {limits.max_stop_length} characters")
    check_token_ids("stopping.stop_token_ids", s.stop_token_ids, vocab_size)
