"""Stores of `/v1/responses` records (gateway/doors/response_store.py): `build_response_store`
picks one from config."""

from __future__ import annotations

from gateway.config import ResponsesConfig
from gateway.doors.response_store import ResponseStore


def build_response_store(config: ResponsesConfig) -> ResponseStore | None:
    """The configured store, or None when storing is off."""
    if config.store == "off":
        return None
    if config.store == "redis":
        from adapters.responses.redis import RedisResponseStore

        assert config.redis_url is not None  # the config requires it for this store
        return RedisResponseStore(config.redis_url, config.key_prefix, config.timeout_s)
    from adapters.responses.sqlite import SQLiteResponseStore

    return SQLiteResponseStore(config.sqlite_path)
