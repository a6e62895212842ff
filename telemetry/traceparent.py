"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header, read and
written without building an OpenTelemetry context, so that a request that is not sampled
pays only for a regular expression and a format string."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
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
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None:
        return None
    version, trace_hex, span_hex, flags, rest = match.groups()
    # Version 00 has exactly four fields; a later version may add some; ff is invalid.
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
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
