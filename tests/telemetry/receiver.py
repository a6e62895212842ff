"""Real OTLP receivers for the tests, over HTTP (POST /v1/traces and /v1/metrics) and gRPC:
protobuf bodies decoded with opentelemetry-proto, kept as received (raw bytes too, to search
for secrets)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

SPAN_KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass
class ReceivedSpan:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    events: list[str]
    resource: dict[str, Any]


@dataclass
class Received:
    raw: list[bytes] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    metrics: list[tuple[dict[str, Any], str, Any]] = field(default_factory=list)  # (resource, name, metric)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spans_of(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def with_attribute(self, key: str, value: Any) -> list[ReceivedSpan]:
        with self.lock:
            return [s for s in self.spans if s.attributes.get(key) == value]

    def metric_names(self) -> set[str]:
        with self.lock:
            return {name for _, name, _ in self.metrics}


def value_of(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs}


def record_traces(received: Received, body: bytes) -> None:
    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        kind=SPAN_KINDS.get(span.kind, str(span.kind)),
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=_attributes(span.attributes),
                        status_code=span.status.code,
                        events=[e.name for e in span.events],
                        resource=resource,
                    )
                )
    with received.lock:
        received.raw.append(body)
        received.spans.extend(spans)


def record_metrics(received: Received, body: bytes) -> None:
    request = ExportMetricsServiceRequest.FromString(body)
    found = []
    for resource_metrics in request.resource_metrics:
        resource = _attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                found.append((resource, metric.name, metric))
    with received.lock:
        received.raw.append(body)
        received.metrics.extend(found)


class OtlpReceiver:
    def __init__(self, port: int, received: Received) -> None:
        self.received = received
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"


def _handler(received: Received) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                record_traces(received, body)
                reply = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                record_metrics(received, body)
                reply = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    received = Received()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(received))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield OtlpReceiver(server.server_address[1], received)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def otlp_grpc_receiver() -> Iterator[OtlpReceiver]:
    """The same over gRPC: the two Export methods, bodies taken as bytes and decoded as above."""
    received = Received()

    def handler(record: Callable[[Received, bytes], None], reply: bytes) -> Any:
        def export(body: bytes, context: Any) -> bytes:
            record(received, body)
            return reply

        return grpc.unary_unary_rpc_method_handler(export)

    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "opentelemetry.proto.collector.trace.v1.TraceService",
                {"Export": handler(record_traces, ExportTraceServiceResponse().SerializeToString())},
            ),
            grpc.method_handlers_generic_handler(
                "opentelemetry.proto.collector.metrics.v1.MetricsService",
                {"Export": handler(record_metrics, ExportMetricsServiceResponse().SerializeToString())},
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield OtlpReceiver(port, received)
    finally:
        server.stop(grace=None)
