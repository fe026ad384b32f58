"""Logging setup and the structured access log (one line per RPC on ``service.access``).

Invariant: log lines never carry a client's bytes raw: non-printable characters are
escaped, and client-chosen strings are cut to ``FIELD_CHARS``.
"""

from __future__ import annotations

import json
import logging
import time

from .calls import CallRecord, Observer

ACCESS_LOGGER = "service.access"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELD_CHARS = 256  # the most characters of a client-chosen string one access-log field keeps


def escape_unprintable(text: str) -> str:
    """``text`` with every non-printable character as a JSON ``\\uXXXX`` escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(ord(c)) for c in text)


def _escape(code: int) -> str:
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


class TextFormatter(logging.Formatter):
    """The text format, non-printable characters escaped (a traceback keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_unprintable(record.message)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message, the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        # json escapes only below U+0020; the rest can only be inside strings.
        return escape_unprintable(json.dumps(entry, ensure_ascii=False, default=str))


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Root logging to stderr in ``text`` or ``json``."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def access_fields(call: CallRecord) -> dict[str, object]:
    fields: dict[str, object] = {
        "method": _clip(call.method),
        "peer": _clip(call.peer),
        "tenant": call.tenant,
        "request_id": _clip(call.request_id),
        "code": call.code,
        "duration_ms": round(call.duration_s * 1000, 3),
    }
    if call.model:
        fields["model"] = _clip(call.model)
    if call.adapter:
        fields["adapter"] = _clip(call.adapter)
    for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "embed_tokens"):
        value = getattr(call, name)
        if value is not None:
            fields[name] = value
    if call.finish_reason:
        fields["finish_reason"] = call.finish_reason
    if call.first_token_at is not None:
        fields["ttft_ms"] = round((call.first_token_at - call.started) * 1000, 3)
    return fields


class AccessLog(Observer):
    def __init__(self, logger: logging.Logger | None = None):
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)

    def on_end(self, call: CallRecord) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        fields = access_fields(call)
        text = " ".join(f"{k}={_text(v)}" for k, v in fields.items() if k != "method")
        self.logger.info("%s %s", _text(fields["method"]), text, extra={"fields": fields})


def _clip(text: str) -> str:
    return text if len(text) <= FIELD_CHARS else text[:FIELD_CHARS] + "..."


def _text(value: object) -> str:
    """A value as one token of a text line: JSON-quoted unless plain."""

    s = str(value)
    if s and s.isprintable() and not any(c.isspace() or c in '"=\\' for c in s):
        return s
    return escape_unprintable(json.dumps(s, ensure_ascii=False))
