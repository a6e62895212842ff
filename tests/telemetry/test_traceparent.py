"""W3C traceparent: what is accepted, what starts a new trace, and what is sent on."""

from __future__ import annotations

import pytest

from telemetry.traceparent import Parent, headers, parse

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


def test_a_well_formed_header_names_the_parent() -> None:
    assert parse(f"00-{TRACE}-{SPAN}-01", "vendor=1") == Parent(
        int(TRACE, 16), int(SPAN, 16), True, "vendor=1"
    )
    assert parse(f"00-{TRACE}-{SPAN}-00") == Parent(int(TRACE, 16), int(SPAN, 16), False, None)
    assert parse(f"01-{TRACE}-{SPAN}-01-future") is not None  # a later version may add fields


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        f"00-{TRACE}-{SPAN}",
        f"00-{TRACE.upper()}-{SPAN}-01",
        f"00-{'0' * 32}-{SPAN}-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"ff-{TRACE}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-01-extra",
    ],
)
def test_anything_else_starts_a_new_trace(value: str | None) -> None:
    assert parse(value) is None


def test_headers_round_trip() -> None:
    sent = headers(int(TRACE, 16), int(SPAN, 16), True, "vendor=1")
    assert sent == {"traceparent": f"00-{TRACE}-{SPAN}-01", "tracestate": "vendor=1"}
    assert parse(sent["traceparent"]) == Parent(int(TRACE, 16), int(SPAN, 16), True, None)
