"""The `telemetry:` block of the config file (see README, "Telemetry").

Absent, the gateway serves its metrics on /metrics and does not trace. Kept apart from
gateway/config.py, which includes it as `GatewayConfig.telemetry`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

WORKFLOW_PATTERN = r"[a-z0-9][a-z0-9_-]{0,31}"
"""What an `x-workflow` value (or a key's label) must look like to become a metric label."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OtlpTarget(_Strict):
    """Where OTLP data goes: a collector (or any OTLP receiver)."""

    protocol: Literal["http", "grpc"] = "http"
    # http: the receiver's base URL (/v1/traces and /v1/metrics are appended);
    # grpc: host:port or http(s)://host:port.
    endpoint: str = "http://127.0.0.1:4318"
    headers: dict[str, str] = {}  # e.g. an authorization header for a hosted collector
    timeout_s: float = Field(5.0, gt=0)  # one export call, retries included
    compression: Literal["none", "gzip"] = "none"


class TracesConfig(_Strict):
    exporter: Literal["none", "console", "otlp"] = "none"
    otlp: OtlpTarget = OtlpTarget()
    # Share of requests traced when the client sent no traceparent; a client's traceparent
    # decides for its own request (parent-based head sampling). 0.1 by default: a traced
    # request costs the gateway about a quarter more CPU (docs/benchmarks.md, Telemetry), so
    # tracing every request is a choice to make (1.0), not a default to discover under load.
    sampling_ratio: float = Field(0.1, ge=0, le=1)
    stage_spans: bool = True  # a child span per request stage
    # Finished spans waiting for export; beyond it they are dropped, and counted. A few
    # hundred bytes each (a request's seven spans are one queued record until encoded).
    queue_size: int = Field(8192, ge=1)
    # Spans per export: a full batch goes at once, the rest every export_interval_s. Each
    # export has a fixed cost (an HTTP round trip, headers parsed), so larger is cheaper per
    # span: 2048 spans is about 300 requests, 0.6 MB of protobuf.
    batch_size: int = Field(2048, ge=1)
    export_interval_s: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _batch_fits(self) -> TracesConfig:
        if self.batch_size > self.queue_size:
            raise ValueError("batch_size cannot exceed queue_size")
        return self


class MetricsOtlpConfig(OtlpTarget):
    interval_s: float = Field(15.0, gt=0)  # how often each worker pushes its cumulative figures


class MetricsConfig(_Strict):
    prometheus: bool = True  # GET /metrics, every worker's figures merged
    otlp: MetricsOtlpConfig | None = None  # also push to a collector
    # Each worker writes its figures for the others this often: /metrics is at most this stale.
    snapshot_interval_s: float = Field(1.0, gt=0)


class LabelsConfig(_Strict):
    """Bounds on the label values a client's requests can create."""

    # Accepted x-workflow values; empty: any value matching WORKFLOW_PATTERN, first come,
    # up to max_workflows per worker. Anything else is counted as "other".
    workflows: list[str] = []
    max_workflows: int = Field(32, ge=1, le=1000)
    prompt_family_buckets: int = Field(16, ge=1, le=256)  # prompt-family hashes fold into this many

    @field_validator("workflows")
    @classmethod
    def _well_formed(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(WORKFLOW_PATTERN, name):
                raise ValueError(f"workflow {name!r} must match {WORKFLOW_PATTERN}")
        return v


class TelemetryConfig(_Strict):
    service_name: str = Field("tollgate", min_length=1)
    resource_attributes: dict[str, str] = {}  # e.g. deployment.environment.name: prod
    traces: TracesConfig = TracesConfig()
    metrics: MetricsConfig = MetricsConfig()
    labels: LabelsConfig = LabelsConfig()
