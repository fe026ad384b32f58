"""Logging setup and the structured access log (one line per RPC on ``service.access``).

Invariants: log lines never carry a client's bytes raw: non-printable characters are
escaped, and client-chosen strings are cut to ``FIELD_CHARS``. Refusals a flood is made of
(``FLOOD_CODES``) are logged at most once per ``FLOOD_WINDOW_S`` for each method, code and
tenant; the next line logged for them counts the ones left out (``suppressed``).
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict

from .calls import CallRecord, Observer

ACCESS_LOGGER = "service.access"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELD_CHARS = 256  # the most characters of a client-chosen string one access-log field keeps
FLOOD_CODES = frozenset({"RESOURCE_EXHAUSTED", "UNAUTHENTICATED"})
FLOOD_WINDOW_S = 1.0
FLOOD_KEYS = 1024  # (method, code, tenant) windows kept; the oldest goes first


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


class FloodWindows:
    """For each key, one admitted event per window; the events left out are counted."""

    def __init__(self, window_s: float = FLOOD_WINDOW_S, max_keys: int = FLOOD_KEYS):
        self.window_s, self.max_keys = window_s, max_keys
        self._windows: OrderedDict[tuple, list] = OrderedDict()  # key -> [window start, left out]

    def admit(self, key: tuple, now: float) -> int | None:
        """None when the event is left out, else how many of ``key``'s were left out before it."""
        window = self._windows.get(key)
        if window is not None and now - window[0] < self.window_s:
            window[1] += 1
            return None
        left_out = window[1] if window is not None else 0
        self._windows[key] = [now, 0]
        self._windows.move_to_end(key)
        while len(self._windows) > self.max_keys:
            self._windows.popitem(last=False)
        return left_out


class AccessLog(Observer):
    """One line per RPC, on the event loop's thread; refusals in a flood are sampled (``FloodWindows``)."""

    def __init__(self, logger: logging.Logger | None = None):
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)
        self.floods = FloodWindows()

    def on_end(self, call: CallRecord) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        left_out: int | None = 0
        if call.code in FLOOD_CODES:
            left_out = self.floods.admit((call.method[:FIELD_CHARS], call.code, call.tenant), time.monotonic())
            if left_out is None:
                return
        fields = access_fields(call)
        if left_out:
            fields["suppressed"] = left_out
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
