"""Idempotency-Key: a repeated non-streamed request gets the stored response of the first,
with no second upstream call or charge.

`claim` runs before the upstream is called and `close` after the response: the key (hashed,
with a hash of the endpoint and body) is claimed for the request's lifetime, then either
stored with the response for `metering.idempotency_ttl_s` or released for a retry. The meter
stage and the settle finisher call them when metering is on; `IdempotencyOnly` does both
when it is off, on the embedded store, opened on the first request that carries a key, so
the header is honoured by every configuration.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.errors import IdempotencyConflict, InvalidRequest, StateStoreUnavailable
from gateway.exchange import Exchange
from gateway.metering.records import StoredResponse
from gateway.ports import StateStore

logger = logging.getLogger("tollgate.metering")

IDEMPOTENCY_HEADER = "idempotency-key"
REPLAYED_HEADER = "idempotent-replayed"
_MAX_KEY_LENGTH = 255


@dataclass(frozen=True, slots=True)
class IdempotencyHold:
    """An Idempotency-Key this request claimed: stored with its response, or released."""

    key: str  # SHA-256 of the client's key, hex
    fingerprint: str  # SHA-256 of the endpoint and request body, hex


async def claim(store: StateStore, exchange: Exchange, key: str, lease_s: float) -> IdempotencyHold | None:
    """The hold this request now has on `key`; None when the request was answered from a
    stored response (`exchange.replay_body` is set). Raises for a key in flight or reused."""
    if not 0 < len(key) <= _MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise InvalidRequest(
            f"Invalid Idempotency-Key header: use 1 to {_MAX_KEY_LENGTH} printable ASCII characters.",
            code="invalid_idempotency_key",
        )
    assert exchange.principal is not None  # claimed after admit
    hold = IdempotencyHold(
        hashlib.sha256(key.encode()).hexdigest(),
        hashlib.sha256(exchange.endpoint.value.encode() + b"\0" + exchange.raw_body).hexdigest(),
    )
    found = await store.claim_idempotency(exchange.principal.tenant.name, hold.key, hold.fingerprint, lease_s)
    if found.state == "in_flight":
        raise IdempotencyConflict(
            "A request with this Idempotency-Key is still in progress; retry once it has completed."
        )
    if found.state == "mismatch":
        raise InvalidRequest(
            "This Idempotency-Key was already used for a different request; use a new key for a new request.",
            code="idempotency_key_reused",
        )
    if found.state == "done" and found.response is not None:
        exchange.replay_body = found.response.body
        exchange.response_headers[REPLAYED_HEADER] = "true"
        return None
    return hold


async def close(store: StateStore, exchange: Exchange, hold: IdempotencyHold, ttl_s: float) -> None:
    """Store the response for replays, or release the key when the request failed."""
    assert exchange.principal is not None
    tenant = exchange.principal.tenant.name
    try:
        if exchange.status == 200 and exchange.response_body is not None:
            response = StoredResponse(200, exchange.response_body)
            await store.complete_idempotency(tenant, hold.key, hold.fingerprint, response, ttl_s)
        else:
            await store.release_idempotency(tenant, hold.key)
    except StateStoreUnavailable:
        # The claim's lease ends with the request's deadline; a retry then starts afresh.
        logger.warning(
            "idempotency key not recorded: the state store is unavailable",
            extra={"request_id": exchange.request_id},
        )


class IdempotencyOnly:
    """Stage and finisher for a gateway without metering: Idempotency-Key on its own store."""

    name = "idempotency"

    def __init__(self, open_store: Callable[[], StateStore], ttl_s: float, lease_grace_s: float) -> None:
        self._open_store = open_store
        self._store: StateStore | None = None
        self._opening = asyncio.Lock()
        self._ttl_s = ttl_s
        self._lease_grace_s = lease_grace_s

    async def __call__(self, exchange: Exchange) -> None:
        key = exchange.headers.get(IDEMPOTENCY_HEADER)
        if key is None or exchange.stream:
            return
        lease_s = max(0.0, exchange.deadline - time.monotonic()) + self._lease_grace_s
        exchange.idempotency = await claim(await self._opened(), exchange, key, lease_s)

    async def finish(self, exchange: Exchange) -> None:
        hold = exchange.idempotency
        if hold is not None and self._store is not None:
            await close(self._store, exchange, hold, self._ttl_s)

    async def _opened(self) -> StateStore:
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    self._store = self._open_store()
        return self._store

    async def aclose(self) -> None:
        if self._store is not None:
            await self._store.aclose()
