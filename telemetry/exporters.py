"""Where telemetry goes, from config: spans to a collector over OTLP or to stdout
(`span_export.py`); metrics through the SDK's OTLP exporters.

OTLP over HTTP (protobuf) or gRPC; grpc is imported only when configured, so the embedded
default never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.sdk.metrics.export import MetricExporter

from gateway.telemetry_config import OtlpTarget, TracesConfig
from telemetry.span_export import ConsoleSpanExporter, Framing, OtlpSpanExporter
from telemetry.span_queue import SpanExporter

if TYPE_CHECKING:
    import grpc


def span_exporter(config: TracesConfig, framing: Framing) -> SpanExporter | None:
    if config.exporter == "none":
        return None
    if config.exporter == "console":
        return ConsoleSpanExporter(framing)
    return OtlpSpanExporter(config.otlp, framing)


def metric_exporter(target: OtlpTarget) -> MetricExporter:
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter(
            endpoint=target.endpoint,
            insecure=not target.endpoint.startswith("https://"),
            headers=dict(target.headers),
            timeout=target.timeout_s,
            compression=_grpc_compression(target),
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(
        endpoint=_http_url(target, "metrics"),
        headers=dict(target.headers),
        timeout=target.timeout_s,
        compression=_http_compression(target),
    )


def _http_url(target: OtlpTarget, signal: str) -> str:
    return f"{target.endpoint.rstrip('/')}/v1/{signal}"


def _http_compression(target: OtlpTarget) -> Compression:
    return Compression.Gzip if target.compression == "gzip" else Compression.NoCompression


def _grpc_compression(target: OtlpTarget) -> grpc.Compression:
    import grpc

    return grpc.Compression.Gzip if target.compression == "gzip" else grpc.Compression.NoCompression
