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
        """A span around one request stage; an exception leaving it marks the span failed."""
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


class _NoTracer:
    __slots__ = ()

    def begin(self, exchange: Exchange) -> RequestTrace:
        return NO_TRACE


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
