"""Job stores: `build_job_store` picks one from config (gateway/jobs/store.py is the port)."""

from __future__ import annotations

from gateway.config import JobsConfig
from gateway.jobs.store import JobStore


def build_job_store(config: JobsConfig) -> JobStore:
    if config.store == "redis":
        from adapters.state.redis_jobs import RedisJobStore

        assert config.redis_url is not None  # the config requires it for this store
        return RedisJobStore(config.redis_url, config.key_prefix, cluster=config.redis_cluster)
    from adapters.state.sqlite_jobs import SQLiteJobStore

    return SQLiteJobStore(config.sqlite_path)
