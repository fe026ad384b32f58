"""A response format as llguidance grammar text, checked against the size limits.
JSON output has fixed separators and no other whitespace: no tokens spent on layout."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llguidance import LLMatcher, LLParserLimits

from ...errors import InvalidRequest
from ...requests import FormatKind, ResponseFormat
from ...settings import setting
from ...validation import json_depth as nesting_depth

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # in its stub only

JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@dataclass(frozen=True)
class GrammarLimits:
    max_bytes: int = setting(64 << 10, "cap on a response_format's schema, regex, grammar or choice options "
                                       "(bytes)", flag="--max-format-bytes")
    max_options: int = 1024  # options of a choice
    max_depth: int = 64  # nesting of a JSON Schema document
    compile_timeout_s: float = setting(5.0, "time a response_format may take to compile (compiling plus the first "
                                            "token mask)", flag="--format-compile-timeout", metavar="SECONDS")
    lexer_fuel: int = 200_000  # llguidance's initial_lexer_fuel
    max_lexer_states: int = 50_000
    cache_entries: int = 256
    compile_threads: int = 2  # per model
    compile_queue: int = setting(64, "response_formats that may wait for a compile thread per model; more are "
                                     "refused with RESOURCE_EXHAUSTED", flag="--format-compile-queue", metavar="N")

    def parser_limits(self) -> LLParserLimits:
        return LLParserLimits(initial_lexer_fuel=self.lexer_fuel, max_lexer_states=self.max_lexer_states,
                              verbose_errors=False)


def field_name(fmt: ResponseFormat) -> str:
    """The API path of the field that carries ``fmt``."""
    suffix = ".options" if fmt.kind is FormatKind.CHOICE else ""
    return f"response_format.{fmt.kind.value}{suffix}"


def check_format(fmt: ResponseFormat, limits: GrammarLimits) -> dict | bool | None:
    """InvalidRequest for a format over the limits or malformed; a JSON schema's parsed
    document."""
    field = field_name(fmt)
    texts = fmt.options if fmt.kind is FormatKind.CHOICE else (fmt.text,)
    if sum(map(len, texts)) > limits.max_bytes:  # characters: at most as many as bytes
        raise InvalidRequest(field, f"is over {limits.max_bytes} bytes; the limit is {limits.max_bytes}")
    size = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    if size > limits.max_bytes:
        raise InvalidRequest(field, f"is {size} bytes; the limit is {limits.max_bytes}")
    if fmt.kind is FormatKind.CHOICE:
        _choice(fmt.options, field, limits)
    elif fmt.kind in (FormatKind.REGEX, FormatKind.GRAMMAR):
        _non_empty(fmt.text, field)
    elif fmt.kind is FormatKind.JSON_SCHEMA:
        return _schema(fmt.text, field, limits)
    return None


def grammar_text(fmt: ResponseFormat, limits: GrammarLimits) -> str:
    """The llguidance grammar for ``fmt``; raises as ``check_format``."""
    field, schema = field_name(fmt), check_format(fmt, limits)
    if fmt.kind is FormatKind.JSON_SCHEMA:
        assert schema is not None  # check_format's parsed document
        return LLMatcher.grammar_from_json_schema(
            schema,  # type: ignore[arg-type]  # llguidance takes a boolean schema too; its stub says str | dict
            defaults=JSON_OPTIONS)
    if fmt.kind is FormatKind.JSON_OBJECT:
        return LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_OPTIONS)
    if fmt.kind is FormatKind.REGEX:
        return LLMatcher.grammar_from_regex(_non_empty(fmt.text, field))
    if fmt.kind is FormatKind.GRAMMAR:
        return LLMatcher.grammar_from_lark(_non_empty(fmt.text, field))
    return LLMatcher.grammar_from_lark(_choice(fmt.options, field, limits))


def _non_empty(text: str, field: str) -> str:
    if not text.strip():
        raise InvalidRequest(field, "must not be empty")
    return text


def _schema(text: str, field: str, limits: GrammarLimits) -> dict | bool:
    try:
        schema = json.loads(_non_empty(text, field))
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(field, f"is not a JSON document: {exc}") from None
    if not isinstance(schema, (dict, bool)):
        raise InvalidRequest(field, "must be a JSON object (or true / false)")
    if nesting_depth(schema) > limits.max_depth:
        raise InvalidRequest(field, f"nests deeper than {limits.max_depth} levels")
    return schema


def _choice(options: tuple[str, ...], field: str, limits: GrammarLimits) -> str:
    if not options:
        raise InvalidRequest(field, "at least one option is required")
    if len(options) > limits.max_options:
        raise InvalidRequest(field, f"at most {limits.max_options} options")
    if not all(options):
        raise InvalidRequest(field, "every option must be a non-empty string")
    return "start: " + " | ".join(json.dumps(o) for o in dict.fromkeys(options))
