"""Telemetry: tracing (the `gateway.tracing` port, OTLP export), metrics (a per-worker registry,
/metrics across workers, OTLP push) and the GenAI attribute names; `grafana/` holds the
dashboards and provisioning, beside the collector, Tempo and Prometheus configs.
`telemetry.setup.build_telemetry` is the one entry point, for the composition root."""
