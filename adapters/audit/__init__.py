"""Audit writers: where the decision log is stored. `build_audit_writer` picks one from config."""

from __future__ import annotations

from gateway.config import AuditConfig
from gateway.ports import AuditWriter


def build_audit_writer(config: AuditConfig) -> AuditWriter:
    if config.sink == "redis":
        from adapters.audit.redis_stream import RedisStreamWriter

        assert config.redis_url is not None  # the config requires it for this sink
        return RedisStreamWriter(config.redis_url, config.stream)
    from adapters.audit.jsonl import JsonlWriter

    # A mandatory record's request waits for it to be on disk; the others are fsynced together.
    interval_s = 0.0 if config.mandatory else config.fsync_interval_ms / 1000
    return JsonlWriter(config.path, fsync=config.fsync == "always", fsync_interval_s=interval_s)
