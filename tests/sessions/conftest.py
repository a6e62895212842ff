"""The real state stores of the metering tests (SQLite file, Redis, Redis Cluster)."""

from tests.metering.conftest import cluster, redis_prefix, store

__all__ = ["cluster", "redis_prefix", "store"]
