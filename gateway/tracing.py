"""Tracing as the core sees it: a port that the edge, the pipeline and the forwarder call.

`telemetry/` implements it on the OpenTelemetry SDK; the core never imports the SDK.
The edge begins one `RequestTrace` per model call (`Tracer.begin`), the pipeline wraps each
stage in `stage(name)`, the forwarder asks `upstream_headers` for each attempt (which also
begins the attempt's span) and the edge calls `end` once the finishers have run.

`NO_TRACER` is what runs when tracing is off: every call is a constant, so a request pays a
few attribute look-ups for it. An implementation decides sampling once, in `begin`; a request
that is not sampled must cost about as little.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gateway.exchange import Attempt, Exchange
    from gateway.ports import Upstream


class RequestTrace(Protocol):
    """The trace of one request."""

    @property
    def trace_id(self) -> str | None:
        """32 lower-case hex digits, or None when the request is not traced at all."""
        ...

    @property
    def span_id(self) -> str | None:
        """The gateway's server span, 16 hex digits (or None)."""
        ...

    @property
    def sampled(self) -> bool:
        """Whether the trace is recorded and exported (only then is it worth linking to)."""
        ...

    def stage(self, name: str) -> contextlib.AbstractContextManager[None]:
        """A span around one request stage; an exception leaving it marks the span failed.
        Asked of a sampled trace only: an unsampled one records no span (pipeline.py)."""
        ...

    def upstream_headers(self, attempt: Attempt, upstream: Upstream) -> Mapping[str, str] | None:
        """Begin the attempt's client span; the headers (traceparent) to send with it."""
        ...

    def end(self, exchange: Exchange) -> None:
        """Close every span of the request from what the exchange records."""
        ...


class Tracer(Protocol):
    def begin(self, exchange: Exchange) -> RequestTrace:
        """The trace of a request whose exchange was just built (headers and request id set)."""
        ...


_NO_STAGE = contextlib.nullcontext()


class _NoTrace:
    __slots__ = ()

    trace_id = None
    span_id = None
    sampled = False

    def stage(self, name: str) -> contextlib.AbstractContextManager[None]:
        return _NO_STAGE

    def upstream_headers(self, attempt: Attempt, upstream: Upstream) -> Mapping[str, str] | None:
        return None

    def end(self, exchange: Exchange) -> None:
        return None


class _PassedOn:
    """A request that is not traced here but came with a W3C trace context: the client's
    `traceparent` (and `tracestate`) go upstream unchanged, so the upstream's spans still join
    the caller's trace, and the logs carry its trace id."""

    __slots__ = ("_headers", "trace_id")

    span_id = None
    sampled = False

    def __init__(self, trace_id: str, headers: Mapping[str, str]) -> None:
        self.trace_id: str | None = trace_id
        self._headers = headers

    def stage(self, name: str) -> contextlib.AbstractContextManager[None]:
        return _NO_STAGE

    def upstream_headers(self, attempt: Attempt, upstream: Upstream) -> Mapping[str, str] | None:
        return self._headers

    def end(self, exchange: Exchange) -> None:
        return None


class _NoTracer:
    """Tracing off: no spans; a client's trace context is still passed on."""

    __slots__ = ()

    def begin(self, exchange: Exchange) -> RequestTrace:
        header = exchange.headers.get("traceparent")
        if header is None:
            return NO_TRACE
        return passed_on(header, exchange.headers.get("tracestate")) or NO_TRACE


_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_TRACESTATE_MAX = 512  # W3C: at most 32 list members; what vendors are asked to propagate


def traceparent_fields(traceparent: str) -> tuple[str, str, str] | None:
    """(trace id, parent id, flags) of a well-formed W3C `traceparent`, as hex; None for
    anything else, which W3C says to ignore. Version 00 has exactly four fields; a later
    version may add some, which are dropped; version ff and all-zero ids are invalid."""
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None:
        return None
    version, trace_hex, span_hex, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or not int(trace_hex, 16) or not int(span_hex, 16):
        return None
    return trace_hex, span_hex, flags


def passed_on(traceparent: str, tracestate: str | None) -> RequestTrace | None:
    """The trace to pass on for a well-formed `traceparent` (as version 00, the one this
    parser knows); None for a malformed one."""
    fields = traceparent_fields(traceparent)
    if fields is None:
        return None
    trace_hex, span_hex, flags = fields
    headers = {"traceparent": f"00-{trace_hex}-{span_hex}-{flags}"}
    if (
        tracestate
        and len(tracestate) <= _TRACESTATE_MAX
        and tracestate.isascii()
        and tracestate.isprintable()
    ):
        headers["tracestate"] = tracestate
    return _PassedOn(trace_hex, headers)


NO_TRACE: RequestTrace = _NoTrace()
NO_TRACER: Tracer = _NoTracer()


@dataclass(frozen=True, slots=True)
class Correlation:
    """The ids that every log line written while serving a request carries."""

    request_id: str
    trace: RequestTrace = NO_TRACE


# Set by the edge for the duration of each request, read by the log formatter. A context
# variable is per request (each request runs in its own task), not shared state.
CORRELATION: ContextVar[Correlation | None] = ContextVar("tollgate_correlation", default=None)
