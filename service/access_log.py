"""Logging setup and the structured access log.

One line per RPC on the logger ``service.access``: method, peer, request id, status
code, duration and token counts. ``--log-format json`` makes every log line (the
access log included) one JSON object; the access log's fields are then top-level keys.
"""

from __future__ import annotations

import json
import logging
import time

from .interceptors import CallRecord, Observer

ACCESS_LOGGER = "service.access"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Root logging to stderr in ``text`` or ``json``."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def access_fields(call: CallRecord) -> dict[str, object]:
    fields: dict[str, object] = {
        "method": call.method,
        "peer": call.peer,
        "request_id": call.request_id,
        "code": call.code,
        "duration_ms": round(call.duration_s * 1000, 3),
    }
    if call.model:
        fields["model"] = call.model
    if call.adapter:
        fields["adapter"] = call.adapter
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
        self.logger.info("%s %s", call.method, text, extra={"fields": fields})


def _text(value: object) -> str:
    s = str(value)
    return s if s and not any(c.isspace() or c in '"=' for c in s) else json.dumps(s, ensure_ascii=False)
