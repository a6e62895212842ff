"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header, read and
written without building an OpenTelemetry context, so that a request that is not sampled
pays only for a regular expression and a format string."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.tracing import traceparent_fields

_SAMPLED = 0x01


@dataclass(frozen=True, slots=True)
class Parent:
    """The caller's span, from its traceparent header."""

    trace_id: int
    span_id: int
    sampled: bool
    tracestate: str | None  # passed on unchanged


def parse(traceparent: str | None, tracestate: str | None = None) -> Parent | None:
    """The parent named by a well-formed header; None for anything else (a new trace starts)."""
    if traceparent is None:
        return None
    fields = traceparent_fields(traceparent)
    if fields is None:
        return None
    trace_hex, span_hex, flags = fields
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    return Parent(trace_id, span_id, bool(int(flags, 16) & _SAMPLED), tracestate or None)


def headers(trace_id: int, span_id: int, sampled: bool, tracestate: str | None) -> dict[str, str]:
    """The headers that make (trace_id, span_id) the parent of the next hop."""
    return headers_hex(f"{trace_id:032x}", span_id, sampled, tracestate)


def headers_hex(trace_hex: str, span_id: int, sampled: bool, tracestate: str | None) -> dict[str, str]:
    """`headers`, with the trace id already written as 32 hex digits."""
    found = {"traceparent": f"00-{trace_hex}-{span_id:016x}-{'01' if sampled else '00'}"}
    if tracestate:
        found["tracestate"] = tracestate
    return found
