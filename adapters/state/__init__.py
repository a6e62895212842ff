"""State stores: budgets, rate limits, idempotency keys and the spend ledger.
`build_state_store` picks one from config."""

from __future__ import annotations

import logging

from gateway.config import StateConfig
from gateway.ports import KeyStore, StateStore

logger = logging.getLogger("tollgate.state")


def build_state_store(config: StateConfig) -> StateStore:
    if config.store == "redis":
        from adapters.state.redis import RedisStore

        assert config.redis_url is not None  # the config requires it for this store
        return RedisStore(config.redis_url, config.key_prefix, config.timeout_s, config.redis_cluster)
    from adapters.state.sqlite import SQLiteStore

    return SQLiteStore(config.sqlite_path)


async def warn_if_not_durable(store: StateStore) -> None:
    """Log a warning at start when the store would lose budgets on a restart of its own."""
    from adapters.state.redis import RedisStore

    if isinstance(store, RedisStore):
        problem = await store.durability_problem()
        if problem is not None:
            logger.warning(problem)


def build_key_store(config: StateConfig) -> KeyStore:
    """The store of live keys: the same place as budgets (`state`)."""
    if config.store == "redis":
        from adapters.state.redis_keys import RedisKeyStore

        assert config.redis_url is not None
        return RedisKeyStore(config.redis_url, config.key_prefix, config.timeout_s, config.redis_cluster)
    from adapters.state.sqlite_keys import SQLiteKeyStore

    return SQLiteKeyStore(config.sqlite_path)
