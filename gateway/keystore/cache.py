"""The live keys this process serves from: a local table, kept up to date by polling.

A request's key is looked up here and nowhere else: no store round trip on the request
path. A background task asks the store for its version every `poll_interval_ms` (one
indexed read on SQLite, one GET on Redis) and, only when it moved, for the keys changed
since. A revocation therefore reaches every worker of every replica within one interval
plus one read (250 ms by default, at most 500 ms); an expiry needs no message at all, since
each lookup compares the key's expiry with the clock.

When the store cannot be read the last table keeps serving (a key revoked meanwhile keeps
working until the store is back), and that is logged once, with its recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import time
from collections.abc import Callable, Mapping

from gateway.errors import StateStoreUnavailable
from gateway.exchange import Principal, Tenant
from gateway.keys import HASH_PREFIX
from gateway.keystore.records import KeyChanges, LiveKey
from gateway.ports import KeyStore

logger = logging.getLogger("tollgate.keys")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class LiveKeyCache:
    def __init__(
        self,
        store: KeyStore,
        tenants: Mapping[str, Tenant],
        interval_s: float,
        clock_ms: Callable[[], int] = now_ms,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._monotonic = monotonic
        self._read_at = monotonic()  # the last time the store's version was read
        self._tenants = dict(tenants)
        self._interval_s = interval_s
        self._clock_ms = clock_ms
        self._version = 0
        self._keys: dict[str, LiveKey] = {}  # id -> every key neither revoked nor expired when last read
        self._by_digest: dict[bytes, tuple[bytes, int | None, Principal]] = {}
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._refreshing = asyncio.Lock()  # the poller's and an admin change's: one at a time, in order

    def __len__(self) -> int:
        return len(self._by_digest)

    @property
    def version(self) -> int:
        return self._version

    def age_s(self) -> float:
        """Seconds since the store's version was last read: how late a revocation may be here."""
        return self._monotonic() - self._read_at

    def tenant_names(self) -> frozenset[str]:
        return frozenset(self._tenants)

    def find(self, digest: bytes) -> Principal | None:
        found = self._by_digest.get(digest)
        if found is None or not hmac.compare_digest(found[0], digest):
            return None
        expires_at_ms = found[1]
        if expires_at_ms is not None and self._clock_ms() >= expires_at_ms:
            return None
        return found[2]

    async def refresh(self) -> None:
        """Read what changed in the store since the last refresh (nothing, if its version
        did not move); a store whose version went back (emptied, replaced) is read whole."""
        async with self._refreshing:
            await self._refresh()

    async def _refresh(self) -> None:
        asked_at = self._monotonic()
        version = await self._store.version()
        if version == self._version:
            self._read_at = asked_at
            return
        went_back = version < self._version
        changes = await self._store.changes(0 if went_back else self._version)
        if went_back:
            logger.warning(
                "the key store's version went back; every live key was read again",
                extra={"was": self._version, "now": changes.version},
            )
            self._keys.clear()  # only now: a failed read above leaves the last table serving
            self._by_digest.clear()
        self._apply(changes)
        self._read_at = asked_at
        logger.info(
            "live keys read",
            extra={
                "version": changes.version,
                "changed": len(changes.keys),
                "serving": len(self),
                "pid": os.getpid(),
            },
        )

    def retarget(self, tenants: Mapping[str, Tenant]) -> None:
        """The config's tenants changed (a reload): keys of a tenant no longer configured
        stop working, the others take their tenant's new settings."""
        self._tenants = dict(tenants)
        self._rebuild()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tollgate-live-keys")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.refresh()
            except StateStoreUnavailable as exc:
                if not self._failing:
                    self._failing = True
                    logger.warning(
                        "live keys cannot be read from the store; the last table read keeps serving "
                        "(revocations wait until it is back)",
                        extra={"store": self._store.name, "why": exc.message},
                    )
                continue
            except Exception:  # the poller must outlive any one bad read
                logger.exception("live keys refresh failed")
                continue
            if self._failing:
                self._failing = False
                logger.info("live keys are read from the store again", extra={"version": self._version})

    def _apply(self, changes: KeyChanges) -> None:
        now = self._clock_ms()
        for key in changes.keys:
            self._forget(key.id)
            if key.usable_at(now):
                self._keys[key.id] = key
                self._enter(key)
        for key_id in [k for k, key in self._keys.items() if not key.usable_at(now)]:
            self._forget(key_id)  # expired since it was read
        self._version = changes.version

    def _rebuild(self) -> None:
        self._by_digest = {}
        for key in self._keys.values():
            self._enter(key)

    def _forget(self, key_id: str) -> None:
        key = self._keys.pop(key_id, None)
        if key is not None:
            self._by_digest.pop(_digest(key), None)

    def _enter(self, key: LiveKey) -> None:
        tenant = self._tenants.get(key.tenant)
        if tenant is None:
            return  # its tenant is not (or no longer) configured here: refused
        principal = Principal(
            tenant,
            key.id,
            key.label,
            default_workflow=key.workflow,
            default_priority=key.priority,
            limits=None if key.limits.empty else key.limits,
        )
        digest = _digest(key)
        self._by_digest[digest] = (digest, key.expires_at_ms, principal)


def _digest(key: LiveKey) -> bytes:
    return bytes.fromhex(key.hash.removeprefix(HASH_PREFIX))
