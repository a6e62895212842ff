"""Key changes, the same whether asked for over /admin/keys or by `tollgate keys`: the new
key minted here (shown once, its hash stored), the store changed in one atomic step, then
one audit record per change naming the credential that asked and what changed, never the
key or its hash.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.config import BudgetConfig, RateLimitConfig
from gateway.errors import InvalidRequest, NotFound, StateStoreUnavailable
from gateway.keys import generate_key, hash_key, key_id
from gateway.keystore.cache import now_ms
from gateway.keystore.records import KeyConflict, KeyLimits, KeyNotFound, KeyNotUsable, LiveKey
from gateway.ports import AuditSink, KeyStore
from gateway.routing_config import Priority
from gateway.telemetry_config import WORKFLOW_PATTERN

logger = logging.getLogger("tollgate.keys")

RECORD_VERSION = 1
_MINT_TRIES = 3  # a new key whose short id is taken (a 48-bit prefix collision) is minted again


_LabelName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")]
_LabelValue = Annotated[str, Field(max_length=200)]


class KeySpec(BaseModel):
    """What a new key says about its requests (the body of POST /admin/keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(min_length=1)
    label: str = Field("", max_length=200)
    # Operators' own metadata (team, env, ...): up to 16 names of [a-z0-9_.-], values up to 200 chars.
    labels: dict[_LabelName, _LabelValue] = Field(default_factory=dict, max_length=16)
    # When it stops working: a moment (ISO 8601 or unix seconds), or seconds from now.
    expires_at: datetime | None = None
    expires_in_s: float | None = Field(None, gt=0)
    # The workflow of its requests that send no x-workflow: one of the config's workflows
    # (routing.workflows, else telemetry.labels.workflows).
    workflow: str | None = Field(None, pattern=f"^{WORKFLOW_PATTERN}$")
    priority: Priority | None = None  # of its requests that send no x-priority (else normal)
    budgets: list[BudgetConfig] = []  # on top of the tenant's
    rate_limits: RateLimitConfig | None = None  # on top of the tenant's


class RotateSpec(BaseModel):
    """The body of POST /admin/keys/{id}/rotate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # How long the old key keeps working beside the new one (0: it stops at once).
    overlap_s: float = Field(3600.0, ge=0, le=90 * 86_400)
    expires_at: datetime | None = None  # the new key's; default: none
    expires_in_s: float | None = Field(None, gt=0)


class KeyOperations:
    def __init__(
        self,
        store: KeyStore,
        tenants: Callable[[], Collection[str]],
        workflows: Collection[str],
        audit: AuditSink | None,
        clock_ms: Callable[[], int] = now_ms,
        changed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`tenants`: the tenants configured now (they change with a config reload);
        `workflows`: the workflow names a key may default to (the config's);
        `changed`: called after each change (the process's own cache reads it at once)."""
        self._store = store
        self._tenants = tenants
        self._workflows = frozenset(workflows)
        self._audit = audit
        self._clock_ms = clock_ms
        self._changed = changed

    async def create(self, spec: KeySpec, by: str, request_id: str | None = None) -> tuple[str, LiveKey]:
        """(the key, shown once; the key as stored)."""
        if spec.tenant not in self._tenants():
            raise InvalidRequest(f"Unknown tenant {spec.tenant!r}.", param="tenant", code="unknown_tenant")
        if spec.workflow is not None and spec.workflow not in self._workflows:
            listed = ", ".join(sorted(self._workflows)) or "none: set routing.workflows"
            raise InvalidRequest(
                f"Unknown workflow {spec.workflow!r} (the config's workflows: {listed}).",
                param="workflow",
                code="unknown_workflow",
            )
        now = self._clock_ms()
        expires = _expiry(spec.expires_at, spec.expires_in_s, now)
        for attempt in range(_MINT_TRIES):
            secret = generate_key()
            digest = hash_key(secret)
            key = LiveKey(
                id=key_id(digest),
                tenant=spec.tenant,
                hash=digest,
                created_at_ms=now,
                label=spec.label,
                labels=tuple(sorted(spec.labels.items())),
                workflow=spec.workflow,
                priority=spec.priority,
                limits=KeyLimits(tuple(spec.budgets), spec.rate_limits),
                created_by=by,
                expires_at_ms=expires,
            )
            try:
                stored = await self._store.insert(key)
            except KeyConflict:
                if attempt + 1 == _MINT_TRIES:
                    raise
                continue
            await self._record("create", stored, by, request_id, {"key": view(stored, now)})
            return secret, stored
        raise AssertionError("unreachable")

    async def listing(self, tenant: str | None = None) -> list[LiveKey]:
        keys = (await self._store.changes(0)).keys
        return sorted(
            (k for k in keys if tenant is None or k.tenant == tenant), key=lambda k: k.created_at_ms
        )

    async def get(self, key_id: str) -> LiveKey:
        found = await self._store.get(key_id)
        if found is None:
            raise _not_found(key_id)
        return found

    async def revoke(self, key_id: str, by: str, request_id: str | None = None) -> LiveKey:
        now = self._clock_ms()
        try:
            before = await self._store.get(key_id)
            stored = await self._store.update(key_id, revoked_at_ms=now)
        except KeyNotFound:
            raise _not_found(key_id) from None
        if before is None or before.revoked_at_ms is None:
            await self._record("revoke", stored, by, request_id, {"revoked_at": _iso(stored.revoked_at_ms)})
        return stored

    async def rotate(
        self, old_id: str, spec: RotateSpec, by: str, request_id: str | None = None
    ) -> tuple[str, LiveKey, LiveKey]:
        """(the new key, shown once; the old key as stored; the new key as stored)."""
        now = self._clock_ms()
        old = await self.get(old_id)
        if old.tenant not in self._tenants():
            raise InvalidRequest(f"Unknown tenant {old.tenant!r}.", param="tenant", code="unknown_tenant")
        secret = generate_key()
        digest = hash_key(secret)
        # Everything the old key said about its requests, under a new secret.
        new = dataclasses.replace(
            old,
            id=key_id(digest),
            hash=digest,
            created_at_ms=now,
            rotated_from=old.id,
            created_by=by,
            expires_at_ms=_expiry(spec.expires_at, spec.expires_in_s, now),
            revoked_at_ms=None,
            version=0,
        )
        try:
            old_stored, new_stored = await self._store.rotate(
                old_id, new, now + round(spec.overlap_s * 1000), now
            )
        except KeyNotFound:
            raise _not_found(old_id) from None
        except KeyNotUsable:
            raise InvalidRequest(
                f"Key {old_id!r} is revoked or expired: only an active key can be rotated.",
                code="key_not_active",
            ) from None
        changes = {"old_expires_at": _iso(old_stored.expires_at_ms), "new_key": view(new_stored, now)}
        await self._record("rotate", old_stored, by, request_id, changes)
        return secret, old_stored, new_stored

    async def _record(
        self, action: str, key: LiveKey, by: str, request_id: str | None, changes: dict[str, Any]
    ) -> None:
        record = {
            "v": RECORD_VERSION,
            "type": "key_change",
            "action": action,
            "key_id": key.id,
            "tenant": key.tenant,
            "by": by,
            "request_id": request_id,
            "at": _iso(self._clock_ms()),
            "changes": changes,
        }
        logger.info("key changed", extra={"action": action, "key_id": key.id, "tenant": key.tenant, "by": by})
        if self._changed is not None:
            with contextlib.suppress(StateStoreUnavailable):  # the poller reads it at its next tick
                await self._changed()
        if self._audit is not None:
            await self._audit.append(record)


def view(key: LiveKey, now: int) -> dict[str, Any]:
    """A key as shown to operators: everything but its hash."""
    return {
        "id": key.id,
        "object": "tollgate.key",
        "tenant": key.tenant,
        "state": key.state_at(now),
        "label": key.label,
        "labels": dict(key.labels),
        "workflow": key.workflow,
        "priority": key.priority,
        "budgets": [b.model_dump(exclude_none=True) for b in key.limits.budgets],
        "rate_limits": key.limits.rate_limits.model_dump(exclude_none=True)
        if key.limits.rate_limits
        else None,
        "created_at": _iso(key.created_at_ms),
        "created_by": key.created_by,
        "expires_at": _iso(key.expires_at_ms),
        "revoked_at": _iso(key.revoked_at_ms),
        "rotated_from": key.rotated_from,
    }


def _expiry(at: datetime | None, in_s: float | None, now: int) -> int | None:
    if at is not None and in_s is not None:
        raise InvalidRequest("Give expires_at or expires_in_s, not both.", param="expires_at")
    if in_s is not None:
        return now + round(in_s * 1000)
    if at is None:
        return None
    moment = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    expires = round(moment.timestamp() * 1000)
    if expires <= now:
        raise InvalidRequest("expires_at is in the past.", param="expires_at", code="invalid_value")
    return expires


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _not_found(key_id: str) -> NotFound:
    return NotFound(f"No live key {key_id!r}.", param="id", code="key_not_found")
