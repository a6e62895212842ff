"""Structured JSON logs on stderr: one object per line, with the fields a record carries.

Every line is scrubbed before it is written (message, fields, traceback): no raw value of a
sensitive-data kind or of a configured credential reaches a log, whatever logged it.
A line written while a request is served carries its request_id, trace_id and span_id.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

from gateway.redaction.scrub import Scrubber, default_scrubber
from gateway.tracing import CORRELATION

# Attributes every LogRecord has; anything else was passed through `extra=` and is a field.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured duplicate of msg
}


_JSON_VALUES = (str, int, float, bool, type(None), dict, list, tuple)


class JsonFormatter(logging.Formatter):
    def __init__(self, scrubber: Scrubber | None = None) -> None:
        super().__init__()
        self._scrubber = scrubber or default_scrubber()

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                # Anything orjson would stringify is stringified first, so that it is scrubbed too.
                entry[key] = value if isinstance(value, _JSON_VALUES) else str(value)
        correlation = CORRELATION.get()
        if correlation is not None:  # a line written while serving a request
            entry.setdefault("request_id", correlation.request_id)
            if correlation.trace.trace_id is not None:
                entry.setdefault("trace_id", correlation.trace.trace_id)
                entry.setdefault("span_id", correlation.trace.span_id)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(self._scrubber.record(entry), default=str).decode()


def configure_logging(level: str = "info", scrubber: Scrubber | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(scrubber))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
