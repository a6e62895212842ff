"""Where spans go: a collector over OTLP (HTTP protobuf or gRPC), or stdout as JSON lines.

Run only by the span queue's export thread. A send that fails or times out fails its batch
(the queue counts the spans as dropped) and is not retried: the next batch goes a second
later, and a collector that is down must not pile work up in the gateway.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import sys
from collections.abc import Callable
from typing import Any, TextIO
from urllib.parse import urlsplit

from gateway.telemetry_config import OtlpTarget
from telemetry import otlp_wire

logger = logging.getLogger("tollgate.telemetry")

GRPC_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class Framing:
    """The resource and scope every export of this worker carries."""

    def __init__(
        self, resource_attributes: dict[str, Any], scope: str, version: str, schema_url: str
    ) -> None:
        self._resource = otlp_wire.resource(resource_attributes)
        self._scope = otlp_wire.scope(scope, version)
        self._schema_url = schema_url

    def request(self, spans: list[bytes]) -> bytes:
        return otlp_wire.export_request(self._resource, self._scope, self._schema_url, spans)


class OtlpSpanExporter:
    def __init__(self, target: OtlpTarget, framing: Framing) -> None:
        self._framing = framing
        self._send, self._close = _grpc(target) if target.protocol == "grpc" else _http(target)

    def export(self, spans: list[bytes]) -> bool:
        try:
            self._send(self._framing.request(spans))
        except Exception as exc:  # the transport's own errors: refused, timed out, 5xx
            logger.warning("span export failed: %s", exc)
            return False
        return True

    def shutdown(self) -> None:
        self._close()


class ConsoleSpanExporter:
    """One JSON object per span on stdout (OTLP's JSON mapping), for looking at, not for collecting."""

    def __init__(self, framing: Framing, out: TextIO | None = None) -> None:
        self._framing = framing
        self._out = out or sys.stdout

    def export(self, spans: list[bytes]) -> bool:
        from google.protobuf.json_format import MessageToJson
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest.FromString(self._framing.request(spans))
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self._out.write(MessageToJson(span, indent=None) + "\n")
        self._out.flush()
        return True

    def shutdown(self) -> None:
        return None


def _http(target: OtlpTarget) -> tuple[Callable[[bytes], None], Callable[[], None]]:
    parts = urlsplit(f"{target.endpoint.rstrip('/')}/v1/traces")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"telemetry.traces.otlp.endpoint must be an http(s) URL, got {target.endpoint!r}")
    headers = {**target.headers, "content-type": "application/x-protobuf"}
    if target.compression == "gzip":
        headers["content-encoding"] = "gzip"
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    held: list[http.client.HTTPConnection] = []  # one keep-alive connection, remade after a failure

    def send(data: bytes) -> None:
        body = gzip.compress(data) if target.compression == "gzip" else data
        if not held:
            held.append(kind(parts.hostname or "", parts.port, timeout=target.timeout_s))
        connection = held[0]
        try:
            connection.request("POST", parts.path, body, headers)
            response = connection.getresponse()
            response.read()
        except Exception:
            held.clear()
            connection.close()
            raise
        if not 200 <= response.status < 300:
            raise OSError(f"the collector answered {response.status}")

    def close() -> None:
        for connection in held:
            connection.close()

    return send, close


def _grpc(target: OtlpTarget) -> tuple[Callable[[bytes], None], Callable[[], None]]:
    import grpc

    parts = urlsplit(target.endpoint if "://" in target.endpoint else f"http://{target.endpoint}")
    channel: Any = (
        grpc.secure_channel(parts.netloc, grpc.ssl_channel_credentials())
        if parts.scheme == "https"
        else grpc.insecure_channel(parts.netloc)
    )
    # No serialisers: the request is already the protobuf bytes, the reply is not read.
    export = channel.unary_unary(GRPC_METHOD)
    metadata = tuple((name.lower(), value) for name, value in target.headers.items())
    compression = grpc.Compression.Gzip if target.compression == "gzip" else grpc.Compression.NoCompression

    def send(data: bytes) -> None:
        export(data, timeout=target.timeout_s, metadata=metadata, compression=compression)

    return send, channel.close
