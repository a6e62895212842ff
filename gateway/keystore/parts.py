"""Live keys' parts, built around one key store, for the composition root."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.admin_auth import AdminCredentials
from gateway.config import GatewayConfig
from gateway.errors import StateStoreUnavailable
from gateway.exchange import Tenant
from gateway.keystore.admin import KeysAdmin
from gateway.keystore.cache import LiveKeyCache
from gateway.keystore.operations import KeyOperations
from gateway.ports import AuditSink, KeyStore

logger = logging.getLogger("tollgate.keys")


@dataclass(frozen=True, slots=True)
class LiveKeys:
    store: KeyStore
    cache: LiveKeyCache  # admit looks keys up in it after the config's (gateway/keystore/lookup.py)
    operations: KeyOperations

    def admin(self, config: GatewayConfig) -> KeysAdmin | None:
        """/admin/keys with the operator credentials of `config`, when it has an `admin` block."""
        return KeysAdmin(AdminCredentials(config.admin.tokens), self.operations) if config.admin else None

    def start(self) -> None:
        self.cache.start()

    async def aclose(self) -> None:
        await self.cache.aclose()
        await self.store.aclose()


async def open_live_keys(
    config: GatewayConfig,
    store: KeyStore,
    tenants: Mapping[str, Tenant],
    audit: AuditSink | None,
) -> LiveKeys:
    """Reads every live key once; a store that cannot be read now is logged, and read by the
    poller as soon as it can be (config keys work meanwhile)."""
    assert config.live_keys is not None
    cache = LiveKeyCache(store, tenants, config.live_keys.poll_interval_ms / 1000)
    try:
        await cache.refresh()
    except StateStoreUnavailable as exc:
        logger.warning(
            "live keys cannot be read at start; only the config's keys work until they can",
            extra={"store": store.name, "why": exc.message},
        )
    operations = KeyOperations(store, cache.tenant_names, config.workflow_names, audit, changed=cache.refresh)
    return LiveKeys(store, cache, operations)
