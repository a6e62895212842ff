"""One structured log line: the JSON object of a message and its fields, scrubbed.

Compiled with the request path (the access line is written for every request); the logging
module's classes that call it stay plain in gateway/logs.py (docs/architecture.md, Compiled
request path).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.redaction.marks import Verbatim
from gateway.redaction.scrub import Scrubber
from gateway.tracing import CORRELATION

_JSON_VALUES = (str, int, float, bool, type(None), dict, list, tuple)
# The exact types, a set look-up before isinstance (the gateway's own ids, Verbatim, among them)
_JSON_TYPES = frozenset((*_JSON_VALUES, Verbatim))


class LineMaker:
    """Lines scrubbed by `scrubber`, their timestamps rendered once a millisecond (a busy
    worker writes several lines in one)."""

    def __init__(self, scrubber: Scrubber) -> None:
        self._scrubber = scrubber
        self._second = -1
        self._second_text = ""
        self._milli = -1
        self._milli_text = Verbatim("")

    def timestamp(self, created: float) -> Verbatim:
        second = int(created)
        msecs = int((created - second) * 1000)  # as logging's `msecs`
        milli = second * 1000 + msecs
        if milli == self._milli:
            return self._milli_text
        if second != self._second:  # strftime once a second, not once a line
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        self._milli = milli
        self._milli_text = Verbatim(f"{self._second_text}.{msecs:03d}Z")
        return self._milli_text

    def line(
        self, created: float, level: str, name: str, msg: str, fields: dict[str, Any], exc: str | None = None
    ) -> str:
        # The timestamp is the gateway's own and new on every line: not scrubbed (a scan could
        # take its digits for a phone number), and kept out of the scrubber's clean cache.
        entry: dict[str, Any] = {
            "ts": self.timestamp(created),
            "level": level,
            "logger": name,
            "msg": msg,
        }
        if _JSON_TYPES.issuperset(map(type, fields.values())):  # the usual line: in one test
            entry.update(fields)
        else:
            for key, value in fields.items():
                # Anything orjson would stringify is stringified first, so that it is scrubbed too.
                if type(value) in _JSON_TYPES or isinstance(value, _JSON_VALUES):
                    entry[key] = value
                else:
                    entry[key] = str(value)
        correlation = CORRELATION.get()
        if correlation is not None:  # a line written while serving a request
            entry.setdefault("request_id", correlation.request_id)
            trace = correlation.trace
            if trace.trace_id is not None:
                entry.setdefault("trace_id", trace.trace_id)
                entry.setdefault("span_id", trace.span_id)
        if exc is not None:
            entry["exc"] = exc
        return orjson.dumps(self._scrubber.record(entry), default=str).decode()
