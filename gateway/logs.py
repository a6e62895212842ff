"""Structured JSON logs on stderr: one object per line, with the fields a record carries.

Every line is scrubbed before it is written (message, fields, traceback): no raw value of a
sensitive-data kind or of a configured credential reaches a log, whatever logged it.
A line written while a request is served carries its request_id, trace_id and span_id.

Lines are written in batches (`BatchedLineHandler`): one access line per request would
otherwise cost a write to stderr per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from typing import Any, TextIO

from gateway.log_line import LineMaker
from gateway.redaction.scrub import Scrubber, default_scrubber
from gateway.tracing import CORRELATION

# Attributes every LogRecord has; anything else was passed through `extra=` and is a field.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured duplicate of msg
}


class JsonFormatter(logging.Formatter):
    def __init__(self, scrubber: Scrubber | None = None) -> None:
        super().__init__()
        self._lines = LineMaker(scrubber or default_scrubber())

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in record.__dict__.items() if k not in _STANDARD and k[0] != "_"}
        exc = self.formatException(record.exc_info) if record.exc_info else None
        level = record.levelname.lower()
        return self._lines.line(record.created, level, record.name, record.getMessage(), fields, exc)

    def line(
        self, created: float, level: str, name: str, msg: str, fields: dict[str, Any], exc: str | None = None
    ) -> str:
        """The JSON line of a message and its fields (gateway/log_line.py), scrubbed."""
        return self._lines.line(created, level, name, msg, fields, exc)


class BatchedLineHandler(logging.Handler):
    """Formats each record at once, writes the lines of requests in batches.

    Lines written while a request is served (the access line above all) wait in a batch,
    written when it holds `max_lines` lines, when a warning or worse arrives,
    `max_delay_s` after its first line, and on `flush()` (at the server's shutdown, and by
    `logging.shutdown` at exit). Any other line is written at once, with the batch before
    it: a worker's last words come after its loop has stopped. A process killed outright
    loses at most `max_delay_s` of lines.
    """

    def __init__(self, stream: TextIO | None = None, max_lines: int = 256, max_delay_s: float = 0.05) -> None:
        super().__init__()
        self._stream = stream
        self._max_lines = max_lines
        self._max_delay_s = max_delay_s
        self._lines: list[str] = []
        self._scheduled: asyncio.TimerHandle | None = None

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr  # sys.stderr read late: tests swap it

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._add(line, record.levelno)

    def emit_info(self, formatter: JsonFormatter, name: str, msg: str, fields: dict[str, Any]) -> None:
        """An INFO line of logger `name`, formatted by `formatter` (this handler's), without
        a LogRecord: see `log_info`."""
        line = formatter.line(time.time(), "info", name, msg, fields)
        self.acquire()
        try:
            self._add(line, logging.INFO)
        finally:
            self.release()

    def _add(self, line: str, levelno: int) -> None:
        self._lines.append(line)
        if (
            len(self._lines) >= self._max_lines
            or levelno >= logging.WARNING
            or CORRELATION.get() is None  # not serving a request: starting, stopping, a timer's
        ):
            self._write()
        elif self._scheduled is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop in this thread: nothing would come back to write it
                self._write()
                return
            self._scheduled = loop.call_later(self._max_delay_s, self.flush)

    def flush(self) -> None:
        self.acquire()
        try:
            self._write()
        finally:
            self.release()

    def _write(self) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        if not self._lines:
            return
        text = "\n".join(self._lines) + "\n"
        self._lines.clear()
        # A closed or broken stderr must not fail the request that logged.
        with contextlib.suppress(OSError, ValueError):
            stream = self.stream
            stream.write(text)
            stream.flush()


def configure_logging(level: str = "info", scrubber: Scrubber | None = None) -> None:
    # The JSON line carries none of these: skip gathering them for every record. `_srcfile`
    # set to None is the logging module's own switch to skip walking the stack for the caller.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    handler = BatchedLineHandler()
    handler.setFormatter(JsonFormatter(scrubber))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def log_info(logger: logging.Logger, msg: str, fields: dict[str, Any]) -> None:
    """`logger.info(msg, extra=fields)`, for the caller that checked `logger.isEnabledFor(INFO)`.

    Where that line could only reach the handler `configure_logging` installed (no other
    handler or filter on the way, as the gateway sets logging up), the handler gets the
    fields directly and writes the same line without the logging module building and
    dispatching a LogRecord: the access line is written for every request.
    """
    direct = _direct_handler(logger)
    if direct is None:
        logger.info(msg, extra=fields)
        return
    handler, formatter = direct
    try:
        handler.emit_info(formatter, logger.name, msg, fields)
    except Exception:  # the logging module's own way reports the trouble
        logger.info(msg, extra=fields)


def _direct_handler(logger: logging.Logger) -> tuple[BatchedLineHandler, JsonFormatter] | None:
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters or current.disabled:
            return None
        if current.parent is None:  # the root
            handlers = current.handlers
            if len(handlers) != 1:
                return None
            handler = handlers[0]
            formatter = handler.formatter
            if (
                type(handler) is not BatchedLineHandler
                or handler.filters
                or handler.level > logging.INFO
                or not isinstance(formatter, JsonFormatter)
            ):
                return None
            return handler, formatter
        if current.handlers or not current.propagate:
            return None
        current = current.parent
    return None


def flush_logs() -> None:
    """Writes every line still held by a handler of the root logger (at shutdown)."""
    for handler in logging.getLogger().handlers:
        handler.flush()
