"""The spans `otlp_wire` writes are what opentelemetry-proto reads back, field for field."""

from __future__ import annotations

import io
import json

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from telemetry import otlp_wire
from telemetry.span_export import ConsoleSpanExporter, Framing
from tests.telemetry.receiver import value_of

ATTRIBUTES = {
    "text": "héllo",
    "count": 3,
    "negative": -7,
    "big": 2**40,
    "ratio": 0.25,
    "flag": True,
    "off": False,
    "reasons": ["stop", "length"],
}
FRAMING = Framing(
    {"service.name": "tollgate-test", "service.instance.id": "h-1"}, "tollgate", "0.1.0", "https://x/1"
)


def _spans() -> list[bytes]:
    return [
        otlp_wire.span(
            0xABC,
            0x1,
            parent_id=0x2,
            parent_remote=True,
            name="POST /v1/chat/completions",
            kind=otlp_wire.SERVER,
            start_ns=1_000,
            end_ns=2_000,
            span_attributes=ATTRIBUTES,
            error="upstream_timeout",
            events=[("tollgate.first_token", 1_500)],
        ),
        otlp_wire.span(
            0xABC,
            0x3,
            parent_id=0x1,
            name="admit",
            kind=otlp_wire.INTERNAL,
            start_ns=1_100,
            end_ns=1_200,
            span_attributes={},
        ),
    ]


def test_spans_decode_with_the_reference_classes() -> None:
    request = ExportTraceServiceRequest.FromString(FRAMING.request(_spans()))
    [resource_spans] = request.resource_spans
    assert {kv.key: value_of(kv.value) for kv in resource_spans.resource.attributes} == {
        "service.name": "tollgate-test",
        "service.instance.id": "h-1",
    }
    [scope_spans] = resource_spans.scope_spans
    assert (scope_spans.scope.name, scope_spans.scope.version, scope_spans.schema_url) == (
        "tollgate",
        "0.1.0",
        "https://x/1",
    )
    server, admit = scope_spans.spans
    assert server.trace_id == (0xABC).to_bytes(16, "big")
    assert server.span_id == (1).to_bytes(8, "big")
    assert server.parent_span_id == (2).to_bytes(8, "big")
    assert (server.name, server.kind) == ("POST /v1/chat/completions", 2)
    assert (server.start_time_unix_nano, server.end_time_unix_nano) == (1_000, 2_000)
    assert {kv.key: value_of(kv.value) for kv in server.attributes} == ATTRIBUTES
    assert [(e.name, e.time_unix_nano) for e in server.events] == [("tollgate.first_token", 1_500)]
    assert (server.status.code, server.status.message) == (2, "upstream_timeout")
    assert server.flags == 0x301  # sampled, parent known to be remote
    assert (admit.name, admit.kind, admit.parent_span_id) == ("admit", 1, (1).to_bytes(8, "big"))
    assert admit.status.code == 0
    assert admit.flags == 0x101


def test_the_console_exporter_prints_one_json_span_per_line() -> None:
    out = io.StringIO()
    assert ConsoleSpanExporter(FRAMING, out).export(_spans())
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["name"] for line in lines] == ["POST /v1/chat/completions", "admit"]


def test_kept_and_fresh_attributes_and_shared_heads_decode_the_same() -> None:
    values = {**ATTRIBUTES, "temperature": 1, "temperature.f": 1.0, "flag.int": 1}
    kept = b"".join(otlp_wire.attribute(k, v) for k, v in values.items())
    # Equal values of other types (True == 1 == 1.0) are kept apart, and a hit returns the same.
    again = b"".join(
        otlp_wire.attribute(k, v) for k, v in {"flag": 1, "temperature": 1.0, "temperature.f": True}.items()
    )
    kept_again = b"".join(otlp_wire.attribute(k, v) for k, v in values.items())
    grouped = otlp_wire.group(("test", 1), lambda: {"g": "x", "n": 2})
    head = otlp_wire.SpanHead(0xABC, 0x1, otlp_wire.fresh_attribute("tollgate.request_id", "r-1"))
    spans = [
        head.child(0x5, "kept", otlp_wire.CLIENT, 10, 20, kept + grouped),
        head.child(0x6, "again", otlp_wire.INTERNAL, 30, 40, again, "boom"),
        head.child(0x7, "kept again", otlp_wire.CLIENT, 10, 20, kept_again + grouped),
    ]
    request = ExportTraceServiceRequest.FromString(FRAMING.request(spans))
    first, second, third = request.resource_spans[0].scope_spans[0].spans
    decoded = {kv.key: value_of(kv.value) for kv in first.attributes}
    assert decoded == {**values, "g": "x", "n": 2, "tollgate.request_id": "r-1"}
    assert type(decoded["temperature"]) is int and type(decoded["temperature.f"]) is float
    assert {kv.key: value_of(kv.value) for kv in second.attributes} == {
        "flag": 1,
        "temperature": 1.0,
        "temperature.f": True,
        "tollgate.request_id": "r-1",
    }
    assert type({kv.key: value_of(kv.value) for kv in second.attributes}["flag"]) is int
    assert third.attributes == first.attributes
    assert (first.trace_id, first.span_id, first.parent_span_id) == (
        (0xABC).to_bytes(16, "big"),
        (5).to_bytes(8, "big"),
        (1).to_bytes(8, "big"),
    )
    assert (first.name, first.kind, first.start_time_unix_nano, first.end_time_unix_nano) == (
        "kept",
        3,
        10,
        20,
    )
    assert (second.status.code, second.status.message, second.flags) == (2, "boom", 0x101)
